"""The lock's guards against silent moves: files two distributions install with different bytes fail
the lock; a dead exclude, a newly beating override and an undeclared FetchContent input are noted."""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from packaging.utils import canonicalize_name

from envlock.model.lockfile import Artifact, read_lock
from envlock.resolution import guards, wheelfiles
from envlock.resolution.cmakefetch import Declared, declared
from envlock.resolution.wheelfiles import ListingError, WheelListing
from envlock.store.store import Store
from kit.index import IndexServer
from kit.wheels import build_wheel
from kit.workspaces import Cli, ScratchWorkspace

COMMIT = "0123456789abcdef0123456789abcdef01234567"
#: Incompressible bytes: beta's wheel is larger than the tail envlock asks for first.
NOISE = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(4000))


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    """``pypi`` (hashes listed; its wheels are read by range requests) and ``nightly`` (no hashes, as
    PyTorch's: its wheels are downloaded into the store to hash them, and read there)."""
    root = tmp_path_factory.mktemp("guards")
    server = IndexServer(root / "served").start()
    server.add_index("pypi", hashes=True)
    server.add_index("nightly", hashes=False)

    def add(index: str, name: str, version: str, **kw: object) -> None:
        server.add(index, build_wheel(root / "wheels" / index, name, version, **kw))  # type: ignore[arg-type]

    add("pypi", "app", "1.0", requires=["mid"])
    add("pypi", "mid", "1.0", requires=["beta"])
    add("pypi", "beta", "1.0", files={"shared/__init__.py": "B = 1\n", "beta/__init__.py": "", "beta/noise.bin": NOISE})
    add("pypi", "gamma", "1.0", files={"shared/__init__.py": "A = 1\n", "gamma/__init__.py": ""})
    add("nightly", "alpha", "1.0", files={"shared/__init__.py": "A = 1\n", "alpha/__init__.py": ""})
    for version in ("1.0", "1.5", "2.0"):
        add("pypi", "dep", version)
    add("pypi", "tinydep", "1.0")
    with server:
        yield server


def spec_text(index: IndexServer, packages: str, extra: str = "") -> str:
    return f"""
[env]
python = "3.11"
platform = "x86_64-manylinux_2_28"
[indexes.pypi]
url = "{index.url('pypi')}"
default = true
[indexes.nightly]
url = "{index.url('nightly')}"
[packages]
{packages}
{extra}
"""


BETA = "beta-1.0-py3-none-any.whl"


def test_two_distributions_installing_one_file_with_different_bytes_fail_the_lock(ws: ScratchWorkspace, cli: Cli,
                                                                                  index: IndexServer) -> None:
    spec = ws.write_spec("e", spec_text(index, 'app = "==1.0"\nalpha = { index = "nightly" }'))
    failed = cli("lock", "e")
    assert failed.code == 1
    assert failed.err == (
        f"envlock: error: {spec}: alpha and beta install the same files with different bytes; the one installed "
        "last would overwrite the other's, so nothing is locked\n"
        "  alpha 1.0 and beta 1.0 both install shared/__init__.py (1 file, different bytes)\n"
        "    alpha 1.0: declared in [packages]\n"
        "    beta 1.0: pulled in by app -> mid -> beta\n"
        '    fix: resolution.exclude = ["beta"] in e.toml, for the one the env does not need; or, if the shared file '
        'is harmless, resolution.allow-overlap = [{ path = "shared/__init__.py", packages = ["alpha", "beta"], '
        'reason = "..." }]\n')
    assert not (ws.root / "locks" / "pylock.e.toml").exists()  # nothing written
    # alpha's index publishes no hash: its wheel is in the store, read there. beta's was read
    # from the index with range requests only (its end: the zip directory and .dist-info).
    seen = [rng for path, rng in index.requests if path.endswith("/" + BETA)]
    assert f"bytes=-{wheelfiles.TAIL_BYTES}" in seen
    assert "" not in seen and all(rng.startswith("bytes=") and not rng.endswith("-") for rng in seen), seen
    assert len(NOISE) > wheelfiles.TAIL_BYTES  # so not the whole wheel either

    # The named fix: excluding beta locks, and is no dead exclude (mid requires it).
    ws.write_spec("e", spec_text(index, 'app = "==1.0"\nalpha = { index = "nightly" }',
                                 '[resolution]\nexclude = ["beta"]'))
    fixed = cli("lock", "e")
    assert fixed.code == 0, fixed.err
    assert "note:" not in fixed.out
    assert [p.name for p in read_lock(ws.root / "locks" / "pylock.e.toml").packages] == ["alpha", "app", "mid"]
    # What was read from the index is kept: a relock asks it nothing about beta again (uv reads
    # its metadata with range requests of its own, every time).
    def ours() -> int:
        return len([1 for path, rng in index.requests if path.endswith("/" + BETA) and rng.startswith("bytes=-")])

    asked = ours()
    ws.write_spec("e", spec_text(index, 'app = "==1.0"\nalpha = { index = "nightly" }'))
    assert cli("lock", "e").code == 1
    assert ours() == asked == 1
    error = json.loads(cli("lock", "e", "--json").out)["error"]
    assert (error["kind"], error["exit_code"], error["details"][1]) == (
        "OverlapError", 1, "  alpha 1.0: declared in [packages]")


def test_the_same_bytes_at_one_path_are_fine(ws: ScratchWorkspace, cli: Cli, index: IndexServer) -> None:
    ws.write_spec("e", spec_text(index, 'gamma = "==1.0"\nalpha = { index = "nightly" }'))
    result = cli("lock", "e")
    assert result.code == 0, result.err
    assert "note:" not in result.out


def test_an_exclude_that_matches_nothing_is_noted(ws: ScratchWorkspace, cli: Cli, index: IndexServer) -> None:
    ws.write_spec("e", spec_text(index, 'app = "==1.0"', '[resolution]\nexclude = ["sgl-fa4"]'))
    result = cli("lock", "e")
    assert result.code == 0, result.err
    assert result.out.splitlines()[-1] == "  note: resolution.exclude: sgl-fa4 matched nothing: no package requires it"
    doc = json.loads(cli("lock", "e", "--json").out)
    assert doc["notes"] == ["resolution.exclude: sgl-fa4 matched nothing: no package requires it"]


def test_a_sync_that_locks_says_the_notes_too(ws: ScratchWorkspace, cli: Cli, index: IndexServer) -> None:
    ws.write_spec("e", spec_text(index, 'tinydep = "==1.0"', '[resolution]\nexclude = ["sgl-fa4"]'))
    result = cli("sync", "e")
    assert result.code == 0, result.err
    assert "  note: resolution.exclude: sgl-fa4 matched nothing: no package requires it" in result.out.splitlines()


def test_a_relock_of_wheels_checked_before_reads_no_file_list_and_a_new_wheel_is_checked_against_all(
        ws: ScratchWorkspace, cli: Cli, index: IndexServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether wheels install one path with different bytes depends on their bytes alone: a relock
    that resolves the very wheels (by sha256) an earlier lock checked reads none of their lists again,
    and still says its notes (the Requires-Dist are kept with the record). One more wheel, and the
    whole set is read and compared again."""
    exclude = '[resolution]\nexclude = ["sgl-fa4"]'
    ws.write_spec("e", spec_text(index, 'app = "==1.0"', exclude))
    assert cli("lock", "e").code == 0
    read: list[list[str]] = []
    real = wheelfiles.listings  # as guards calls it

    def listings(wheels: Mapping[str, Artifact], *args: Any, **kwargs: Any) -> dict[str, WheelListing | ListingError]:
        read.append(sorted(wheels))
        return real(wheels, *args, **kwargs)

    monkeypatch.setattr(guards, "listings", listings)
    again = cli("lock", "e")
    assert (again.code, read) == (0, [])
    assert again.out.splitlines()[-1] == "  note: resolution.exclude: sgl-fa4 matched nothing: no package requires it"
    ws.write_spec("e", spec_text(index, 'app = "==1.0"\nalpha = { index = "nightly" }', exclude))
    failed = cli("lock", "e")
    assert failed.code == 1
    assert failed.err.splitlines()[1] == (
        "  alpha 1.0 and beta 1.0 both install shared/__init__.py (1 file, different bytes)")
    assert read == [["alpha", "app", "beta", "mid"]]


def _project(root: Path, dependencies: str, cmake: dict[str, str] | None = None) -> None:
    """A local source tree ``myapp`` with static metadata (and CMake files, if given)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "myapp"\nversion = "0.1.0"\ndependencies = {dependencies}\n')
    for rel, text in (cmake or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def _built(index: IndexServer, extra: str = "") -> str:
    return spec_text(index, 'myapp = { build = "myapp" }',
                     f'[sources.myapp]\npath = "myapp"\n[builds.myapp]\nsource = "myapp"\n{extra}')


def test_an_override_that_beats_a_pin_it_did_not_beat_before_is_noted(
        ws: ScratchWorkspace, cli: Cli, index: IndexServer) -> None:
    override = '[resolution]\noverrides = ["dep==2.0"]'
    _project(ws.root / "myapp", '["dep>=1.0"]')
    ws.write_spec("e", _built(index, override))
    first = cli("lock", "e")
    assert first.code == 0, first.err
    assert "note:" not in first.out  # 2.0 is what myapp allows: nothing beaten
    assert read_lock(ws.root / "locks" / "pylock.e.toml").overridden == ()

    _project(ws.root / "myapp", '["dep==1.5", "tinydep"]')  # upstream pins dep now
    moved = cli("lock", "e")
    assert moved.code == 0, moved.err
    assert moved.out.splitlines()[-1] == "  note: resolution.overrides: dep==2.0 overrides myapp's dep==1.5"
    lock = read_lock(ws.root / "locks" / "pylock.e.toml")
    assert lock.package("dep") is not None and lock.package("dep").version == "2.0"  # type: ignore[union-attr]
    assert lock.overridden == ("myapp: dep==1.5",)
    assert 'overridden = [\n    "myapp: dep==1.5",\n]' in ws.lock_text("e")
    # Beaten at the last lock too: said once, not at every lock.
    again = cli("lock", "e")
    assert (again.code, "note:" in again.out) == (0, False)


def test_a_first_lock_records_the_pins_its_overrides_beat_without_a_note(ws: ScratchWorkspace, cli: Cli,
                                                                         index: IndexServer) -> None:
    _project(ws.root / "myapp", '["dep==1.0"]')
    ws.write_spec("e", _built(index, '[resolution]\noverrides = ["dep==2.0"]'))
    result = cli("lock", "e")
    assert result.code == 0, result.err
    assert "note:" not in result.out
    assert read_lock(ws.root / "locks" / "pylock.e.toml").overridden == ("myapp: dep==1.0",)


CMAKE = f"""\
cmake_minimum_required(VERSION 3.15)
project(myapp LANGUAGES C)
include(FetchContent)
FetchContent_Declare(
    repo-declared
    GIT_REPOSITORY https://github.com/example/declared.git
    GIT_TAG        {COMMIT}  # the spec's commit
)
FetchContent_Declare(repo-moved GIT_REPOSITORY "https://github.com/example/moved.git" GIT_TAG v1.3.0)
# FetchContent_Declare(repo-commented GIT_REPOSITORY https://github.com/example/no.git GIT_TAG main)
include(cmake/extra.cmake)
"""
HASH = "45992d7de7d051dc897aff33156a2b7515d745fc489008adc7924ab884578d52"
# As sgl-kernel at 69b02ea6 sets its mirror's host: a cache variable's default, expanded in the URL.
EXTRA_CMAKE = f"""\
set(ARTIFACTS "artifacts.example" CACHE STRING "GitHub mirror URL")
FetchContent_Declare(
  repo-undeclared
  URL https://${{ARTIFACTS}}/example/undeclared/archive/abc123.tar.gz
  URL_HASH SHA256={HASH.upper()}
)
"""


def test_a_fetchcontent_input_the_cmake_files_declare_otherwise_is_noted(ws: ScratchWorkspace, cli: Cli,
                                                                         index: IndexServer) -> None:
    _project(ws.root / "myapp", "[]", {"CMakeLists.txt": CMAKE, "cmake/extra.cmake": EXTRA_CMAKE})
    fetchcontent = (f'[builds.myapp.fetchcontent]\n'
                    f'repo-declared = {{ git = "https://mirror.example/declared", rev = "{COMMIT}" }}\n'
                    f'repo-moved = {{ git = "https://github.com/example/moved.git", rev = "{COMMIT}" }}\n')
    ws.write_spec("e", _built(index, fetchcontent))
    # Both pinned by commit at hosts a test cannot reach: `lock` pins FetchContent inputs, it fetches none.
    result = cli("lock", "e")
    assert result.code == 0, result.err
    assert [line for line in result.out.splitlines() if "note:" in line] == [
        f"  note: builds.myapp.fetchcontent.repo-moved: CMakeLists.txt declares GIT_TAG v1.3.0; the spec has "
        f"git https://github.com/example/moved.git at rev {COMMIT} (as upstream: repo-moved = {{ git = "
        '"https://github.com/example/moved.git", rev = "v1.3.0" })',
        "  note: builds.myapp.fetchcontent: cmake/extra.cmake declares repo-undeclared (URL "
        "https://artifacts.example/example/undeclared/archive/abc123.tar.gz), the spec does not: the build "
        "downloads it unchecked, or cannot configure (declare repo-undeclared = { url = "
        f'"https://artifacts.example/example/undeclared/archive/abc123.tar.gz", sha256 = "{HASH}" }})',
    ]


# -- the parts --------------------------------------------------------------------


def test_cmake_declarations_are_read_with_their_variables(tmp_path: Path) -> None:
    _project(tmp_path, "[]", {"CMakeLists.txt": CMAKE, "cmake/extra.cmake": EXTRA_CMAKE})
    assert declared(tmp_path) == [
        Declared("repo-declared", "CMakeLists.txt", git="https://github.com/example/declared.git", tag=COMMIT),
        Declared("repo-moved", "CMakeLists.txt", git="https://github.com/example/moved.git", tag="v1.3.0"),
        Declared("repo-undeclared", "cmake/extra.cmake",
                 url="https://artifacts.example/example/undeclared/archive/abc123.tar.gz", sha256=HASH),
    ]


FULL = "df022eba0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize(("written", "spec_git", "rev", "note"), [
    (Declared("repo-a", "cmake/a.cmake", url="https://${GH}/x/a/archive/df022eba.tar.gz"), "https://x/a", FULL, ""),
    (Declared("repo-a", "cmake/a.cmake", url=f"https://h/x/a/archive/{FULL}.zip"), "https://x/a", FULL, ""),
    (Declared("repo-a", "CMakeLists.txt", git="https://github.com/x/a.git", tag="df022eb"), "/mirror/a", FULL, ""),
    (Declared("repo-a", "CMakeLists.txt", git="https://github.com/x/a", tag="df02"), "https://x/a", FULL,
     "builds.k.fetchcontent.repo-a: k/CMakeLists.txt declares GIT_TAG df02; the spec has git https://x/a "
     f'at rev {FULL} (as upstream: repo-a = {{ git = "https://github.com/x/a", rev = "df02" }})'),
    (Declared("repo-a", "CMakeLists.txt", git="https://github.com/x/other.git", tag=FULL), "https://x/a", FULL,
     "builds.k.fetchcontent.repo-a: k/CMakeLists.txt declares GIT_REPOSITORY https://github.com/x/other.git; "
     f'the spec has git https://x/a at rev {FULL} (as upstream: repo-a = {{ git = "https://github.com/x/other.git", '
     f'rev = "{FULL}" }})'),
    # The triton move: a tag in git form, then an archive of the next tag, with upstream's hash in the hint.
    (Declared("REPO-A", "cmake/a.cmake", url="https://h/x/a/archive/v3.6.0.tar.gz", sha256=HASH), "https://x/a",
     "v3.5.1", "builds.k.fetchcontent.repo-a: k/cmake/a.cmake declares URL https://h/x/a/archive/v3.6.0.tar.gz; "
     f'the spec has git https://x/a at rev v3.5.1 (as upstream: repo-a = {{ url = '
     f'"https://h/x/a/archive/v3.6.0.tar.gz", sha256 = "{HASH}" }})'),
])
def test_fetchcontent_inputs_are_held_to_what_cmake_declares(written: Declared, spec_git: str, rev: str,
                                                             note: str) -> None:
    from envlock.model.spec import BuildSpec, FetchContentInput

    inputs = (FetchContentInput("repo-a", spec_git, rev),)
    build = BuildSpec(name="k", source="s", subdirectory="k", fetchcontent=inputs)
    assert guards.fetchcontent_notes(build, "k", [written]) == ([note] if note else [])


def _listing(files: dict[str, str]) -> WheelListing:
    return WheelListing(files=files, requires=())


def test_file_overlaps_compare_record_hashes() -> None:
    n = canonicalize_name
    found = {
        n("a"): _listing({"ns/__init__.py": "sha256=same", "pkg/x.py": "sha256=1", "pkg/y.py": "sha256=2"}),
        n("b"): _listing({"ns/__init__.py": "sha256=same", "pkg/x.py": "sha256=9", "pkg/y.py": "sha256=2"}),
        n("c"): _listing({"c/__init__.py": "sha256=3", "pkg/y.py": ""}),  # no hash: cannot be the same
    }
    assert guards.file_overlaps(found) == [
        guards.Overlap(n("a"), n("b"), ("pkg/x.py",)),
        guards.Overlap(n("a"), n("c"), ("pkg/y.py",)),
        guards.Overlap(n("b"), n("c"), ("pkg/y.py",)),
    ]


def test_a_listing_is_read_by_range_requests_where_the_record_sits(tmp_path: Path, store: Store) -> None:
    """A wheel whose .dist-info is not at its end (a writer that puts it first): the directory comes
    with the tail, RECORD with one more range request; never the whole file."""
    path = tmp_path / "odd-1.0-py3-none-any.whl"
    record = "odd/__init__.py,sha256=abc,1\nodd/big.bin,sha256=def,2\nodd-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("odd-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: odd\nVersion: 1.0\n"
                                                  "Requires-Dist: tinydep>=1; extra == 'x'\n")
        zf.writestr("odd-1.0.dist-info/RECORD", record)
        zf.writestr("odd/__init__.py", "")
        zf.writestr("odd/big.bin", NOISE * 2)
    server = IndexServer(tmp_path / "served")
    server.add("pypi", path)
    server.start()
    try:
        url = server.file_url("pypi", path.name)
        got = wheelfiles.listing(Artifact(sha256="0" * 64, url=url), store)
        asked = [rng for p, rng in server.requests if p.endswith(path.name)]
    finally:
        server.stop()
    assert got.files == {"odd/__init__.py": "sha256=abc", "odd/big.bin": "sha256=def"}
    assert got.requires == ("tinydep>=1; extra == 'x'",)
    assert asked[0] == f"bytes=-{wheelfiles.TAIL_BYTES}" and len(asked) == 2 and asked[1].startswith("bytes=0-")
    assert got.via == "index"
    assert wheelfiles.listing(Artifact(sha256="0" * 64, url=url), store).via == "cache"  # the server is gone


def test_a_listing_whose_read_breaks_once_is_read_again(tmp_path: Path, store: Store) -> None:
    """A range read cut mid-body (a dropped connection, a timeout under a saturated link) is tried again:
    a file list that could not be read changes what the lock records, so a relock would differ."""
    path = tmp_path / "cut-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("cut-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: cut\nVersion: 1.0\n"
                                                  "Requires-Dist: tinydep\n")
        zf.writestr("cut-1.0.dist-info/RECORD", "cut/__init__.py,sha256=abc,1\ncut-1.0.dist-info/RECORD,,\n")
        zf.writestr("cut/__init__.py", "")
    server = IndexServer(tmp_path / "served")
    server.add("pypi", path)
    server.faults[path.name] = "cut-once"
    server.start()
    try:
        got = wheelfiles.listing(Artifact(sha256="1" * 64, url=server.file_url("pypi", path.name)), store)
        asked = [rng for p, rng in server.requests if p.endswith(path.name)]
    finally:
        server.stop()
    assert got.requires == ("tinydep",) and got.files == {"cut/__init__.py": "sha256=abc"}
    assert asked == [f"bytes=-{wheelfiles.TAIL_BYTES}"] * 2  # the cut answer, then the whole one


def test_a_stored_wheel_is_read_there_once_then_from_its_record(tmp_path: Path, store: Store) -> None:
    """The store's copy (verified bytes) is read once; a record of what an index served by ranges is
    not taken for it."""
    wheel = build_wheel(tmp_path / "w", "solo", "1.0", files={"solo/__init__.py": "X = 1\n"}, requires=["tinydep"])
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    art = Artifact(sha256=sha, url=f"http://127.0.0.1:9/files/{wheel.name}")  # nothing listens there
    record = store.path("listings", f"{sha}.json")
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"files": {"other/x.py": "sha256=x"}, "requires": []}))  # as a range read
    with store.new_entry("wheels", sha) as work:
        (work / wheel.name).write_bytes(wheel.read_bytes())
    first = wheelfiles.listing(art, store)
    assert (first.via, list(first.files), first.requires) == ("store", ["solo/__init__.py"], ("tinydep",))
    (store.path("wheels", sha) / wheel.name).write_bytes(b"not a zip")  # not opened again: no ListingError
    second = wheelfiles.listing(art, store)
    assert (second.via, second.files, second.requires) == ("cache", first.files, first.requires)


def _graph(nodes: dict[str, list[str] | None], roots: list[str]) -> guards.Requirements:
    from packaging.requirements import Requirement

    from envlock.model.target import target_environment

    graph = guards.Requirements(
        nodes={canonicalize_name(n): None if reqs is None else [Requirement(r) for r in reqs]
               for n, reqs in nodes.items()},
        roots=[Requirement(r) for r in roots],
        environment=target_environment("3.11", "x86_64-manylinux_2_28"))
    graph.walk()
    return graph


def test_who_requires_whom_is_read_for_the_target_with_the_extras_asked() -> None:
    n = canonicalize_name
    graph = _graph({
        "sglang": ["xgrammar", "flashinfer_python[cu13]==0.6.12", "mac-only; sys_platform == 'darwin'"],
        "xgrammar": ["triton; platform_system == 'Linux' and platform_machine == 'x86_64'"],
        "flashinfer-python": ["cuda-extra; extra == 'cu13'", "unused; extra == 'other'"],
        "triton": [], "cuda-extra": [], "mac-only": [], "unused": [],
    }, ["sglang"])
    assert graph.chain(n("triton")) == ["sglang", "xgrammar", "triton"]
    assert graph.chain(n("cuda-extra")) == ["sglang", "flashinfer-python", "cuda-extra"]
    assert graph.chain(n("mac-only")) == [] and graph.chain(n("unused")) == []
    assert [(str(who), str(req)) for who, req in graph.requirers(n("flashinfer-python"))] == [
        ("sglang", "flashinfer_python[cu13]==0.6.12")]


def test_a_dead_exclude_is_not_said_when_a_requirer_is_not_known(tmp_path: Path) -> None:
    from envlock.model.spec import parse_spec

    doc = {"env": {"python": "3.11"}, "indexes": {"pypi": {"url": "https://pypi.org/simple", "default": True}},
           "packages": {"app": "==1.0"}, "resolution": {"exclude": ["gone"]}}
    spec = parse_spec(doc, name="e", origin=tmp_path / "e.toml")
    assert guards.dead_excludes(spec, _graph({"app": ["mid"], "mid": []}, ["app"])) == [
        "resolution.exclude: gone matched nothing: no package requires it"]
    assert guards.dead_excludes(spec, _graph({"app": ["mid"], "mid": None}, ["app"])) == []
    assert guards.dead_excludes(spec, _graph({"app": ["mid"], "mid": ["gone>=1"]}, ["app"])) == []


@pytest.mark.parametrize(
    ("own", "extras", "unmet"),
    [
        (["otherdep==2.0"], set(), ["otherdep==2.0 (the resolution has no otherdep)"]),
        (["dep>=2"], set(), ["dep>=2 (the resolution has dep 1.5)"]),
        (["dep>=1", "dep<2"], set(), []),  # met
        # a marker false for the target (linux, 3.11): uv drops it too
        (['otherdep; sys_platform == "darwin"', 'otherdep; python_version < "3.10"'], set(), []),
        (['otherdep; sys_platform == "linux"'], set(), ["otherdep; sys_platform == \"linux\" (the resolution has "
                                                          "no otherdep)"]),
        # an extra counts only when the package was required with it
        (['otherdep; extra == "gpu"'], set(), []),
        (['otherdep; extra == "gpu"'], {"gpu"}, ["otherdep; extra == \"gpu\" (the resolution has no otherdep)"]),
        # markers on values envlock may read otherwise than uv are uv's call
        (['otherdep; platform_release >= "5"', 'otherdep; python_full_version >= "3.11.4"'], set(), []),
        # what the spec decides itself: its excludes, overrides, builds and nightlies
        (["sgl-fa4", "flashinfer-python==0.6.12", "kernel==9", "torch==2.13"], set(), []),
        (["not a requirement ((("], set(), []),
    ],
)
def test_a_wheels_own_requirements_unmet_by_the_resolution(tmp_path: Path, own: list[str], extras: set[str],
                                                            unmet: list[str]) -> None:
    from envlock.model.spec import parse_spec

    doc = {"env": {"python": "3.11", "platform": "x86_64-manylinux_2_28"},
           "indexes": {"pypi": {"url": "https://pypi.org/simple", "default": True},
                       "pt": {"url": "https://download.pytorch.org/whl/nightly/cpu"}},
           "packages": {"app": "==1.0", "kernel": {"build": "kernel"},
                        "torch": {"nightly": "2026-03-07", "index": "pt"}},
           "sources": {"kernel": {"path": "kernel"}}, "builds": {"kernel": {"source": "kernel"}},
           "resolution": {"exclude": ["sgl-fa4"], "overrides": ["flashinfer-python==0.6.5"]}}
    (tmp_path / "kernel").mkdir()
    spec = parse_spec(doc, name="e", origin=tmp_path / "e.toml", root=tmp_path)
    versions = {canonicalize_name(n): v for n, v in {"app": "1.0", "dep": "1.5", "flashinfer-python": "0.6.5",
                                                     "torch": "2.12.0.dev20260307"}.items()}
    assert guards.unmet(spec, own, extras, versions) == unmet


def test_the_recorded_graph_names_every_locked_requirement_whatever_its_marker() -> None:
    # What `lock --check` holds each package to: a package reached from the spec's roots through it.
    # Markers and extras are not evaluated (uv took the package for some requirement naming it),
    # and what only a package of unknown requirements (a build's dynamic metadata) can require is
    # recorded as its.
    from packaging.requirements import Requirement
    from packaging.utils import NormalizedName

    def n(name: str) -> NormalizedName:
        return canonicalize_name(name)

    nodes = {
        n("app"): [Requirement("lib>=1"), Requirement("socks; extra == 'proxy'"), Requirement("absent")],
        n("lib"): [Requirement("winonly; sys_platform == 'win32'"), Requirement("App")],
        n("socks"): [], n("winonly"): [],
        n("kernel"): None,  # a build whose requirements are not static
        n("torch"): [], n("helper"): [],
    }
    recorded = guards.recorded_requires(nodes, [n("app"), n("kernel")])
    assert recorded == {"app": ("lib", "socks"), "kernel": ("helper", "torch"), "lib": ("app", "winonly")}
    assert guards.recorded_requires({n("a"): [], n("b"): None}, [n("a")]) == {}  # b: reached by nothing
