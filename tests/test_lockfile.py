"""Lock files: round trip, PEP 751 validity, deterministic bytes, clear errors."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.pylock import Pylock
from packaging.utils import canonicalize_name

from envlock.errors import LockError
from envlock.model.lockfile import (
    Artifact,
    Lock,
    LockedBuild,
    LockedPackage,
    LockedPatch,
    LockedSource,
    NightlyPin,
    read_lock,
)
from envlock.model.tomlio import toml_string
from kit.locks import sample_lock


def test_round_trip_and_pep751() -> None:
    lock = sample_lock()
    text = lock.to_toml()
    Pylock.from_dict(tomllib.loads(text))
    again = Lock.from_toml(text, "x")
    assert again == lock
    assert again.to_toml() == text
    assert '\n[tool.envlock.requires]\n"sgl-kernel" = ["torch"]\n' in text
    # A lock that records no graph (an older envlock's) is told from one whose packages require nothing.
    assert Lock.from_toml(text.replace('[tool.envlock.requires]\n"sgl-kernel" = ["torch"]\n', ""), "x").requires is None
    assert Lock.from_toml(text.replace('"sgl-kernel" = ["torch"]\n', ""), "x").requires == {}


def yanked_sample() -> Lock:
    """``sample`` with torch's release recorded as yanked when locked."""
    torch, kernel = sample_lock().packages
    return sample_lock(packages=(replace(torch, yanked='bad "build"'), kernel))


def test_a_yanked_release_is_recorded_in_the_packages_own_tool_table() -> None:
    text = yanked_sample().to_toml()
    assert Lock.from_toml(text, "x") == yanked_sample()
    assert '\n]\n\n[packages.tool.envlock]\nyanked = "bad \\"build\\""\n\n[[packages]]\nname = "sgl-kernel"' in text
    assert Pylock.from_dict(tomllib.loads(text)).packages[0].tool == {"envlock": {"yanked": 'bad "build"'}}
    # Another tool's table beside it is that tool's: read past, not kept.
    other = text.replace("[packages.tool.envlock]\n", "[packages.tool.other]\nx = 1\n[packages.tool.envlock]\n")
    assert Lock.from_toml(other, "x") == yanked_sample()
    unyanked = text.replace('\n[packages.tool.envlock]\nyanked = "bad \\"build\\""\n', "")
    assert Lock.from_toml(unyanked, "x") == sample_lock()


def test_filename_is_unquoted() -> None:
    assert sample_lock().packages[0].wheels[0].filename == "torch-2.12.0.dev20260307+cu130-cp312-cp312-linux_x86_64.whl"


def test_install_digest_ignores_venv_digest_but_not_wheels() -> None:
    lock = sample_lock()
    assert lock.with_venv_digest(None).install_digest() == lock.install_digest()
    other = sample_lock(packages=(sample_lock().packages[0],))
    assert other.install_digest() != lock.install_digest()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lock-version = [", "not valid TOML"),
        ('lock-version = "1.0"\n',
         "tool.envlock: missing (a PEP 751 lock, not written by envlock); expected the [tool.envlock] table "
         "`envlock lock` writes"),
        ('lock-version = "1.0"\n[tool.envlock]\nformat = 9\n',
         "tool.envlock.format: found 9; expected 1 (a lock from another envlock version: regenerate it with "
         "`envlock lock`)"),
        ('lock-version = "1.0"\n[tool.envlock]\nformat = true\n',
         "tool.envlock.format: found true; expected 1 (a lock from another envlock version: regenerate it with "
         "`envlock lock`)"),
        ('lock-version = "1.0"\n[tool]\nenvlock = 1\n', "tool.envlock: found 1; expected a table"),
        ('lock-version = "1.0"\npackages = ["x"]\n[tool.envlock]\nformat = 1\n',
         "packages[0]: found 'x'; expected a table"),
        ('[tool.envlock]\nformat = 1\n',
         "not a PEP 751 lock (no lock-version); expected a pylock.*.toml file written by `envlock lock`"),
        ('[env]\npython = "3.11"\n[packages]\nrequests = "==2"\n',
         "not a PEP 751 lock (no lock-version); it has an [env] table, so it looks like an env spec: its lock is "
         "locks/pylock.e.toml"),
    ],
)
def test_bad_lock_files(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "pylock.e.toml"
    path.write_text(text)
    with pytest.raises(LockError) as info:
        read_lock(path)
    assert info.value.message.startswith(f"{path}: {message}")
    assert info.value.exit_code == 2


def test_an_env_spec_given_as_a_lock_is_named_as_one() -> None:
    # `envlock diff envs/demo.toml demo` used to advise regenerating the spec with `envlock lock`.
    spec = Path(__file__).resolve().parents[1] / "envs" / "demo.toml"
    with pytest.raises(LockError) as info:
        read_lock(spec)
    assert info.value.message == (f"{spec}: not a PEP 751 lock (no lock-version); it has an [env] table, so it "
                                  "looks like an env spec: its lock is locks/pylock.demo.toml")
    with pytest.raises(LockError, match=r"^envs/demo.toml@HEAD: .* its lock is locks/pylock.demo.toml$"):
        Lock.from_toml(spec.read_text(), "envs/demo.toml@HEAD")


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('hashes = { sha256 = "' + "a" * 64 + '" }', 'hashes = { md5 = "abc" }',
         "packages[0].wheels[0].hashes.sha256 (package 'torch'): missing, found only md5; expected the wheel's "
         "sha256 (envlock locks every wheel by sha256)"),
        ('hashes = { sha256 = "' + "a" * 64 + '" }', "hashes = {}",
         "packages[0].wheels[0].hashes.sha256 (package 'torch'): missing; expected the wheel's sha256 "
         "(envlock locks every wheel by sha256)"),
        ('hashes = { sha256 = "' + "a" * 64 + '" }', 'hashes = "' + "a" * 64 + '"',
         "packages[0].wheels[0].hashes (package 'torch'): found '" + "a" * 64 + "'; expected a table"),
        ('version = "0.3.21"', "version = 3", "packages[1].version (package 'sgl-kernel'): found 3; expected a string"),
        ('name = "sgl-kernel"', "name = true", "packages[1].name: found true; expected a string"),
        ('wheels = [\n    { path', 'wheels = []\nxwheels = [\n    { path',
         "packages[1].wheels (package 'sgl-kernel'): found an empty array; expected a wheel (envlock installs "
         "wheels only)"),
        ('env = "e"', "env = 1", "tool.envlock.env: found 1; expected a string"),
        ('"packages.torch" = "abc"', '"packages.torch" = 1',
         'tool.envlock.spec-keys."packages.torch": found 1; expected a string'),
        ('"torch" = { date = "2026-03-07",', '"torch" = { date = 20260307,',
         "tool.envlock.nightlies.torch.date: found 20260307; expected a string"),
        ('"sgl-kernel" = ["torch"]', '"sgl-kernel" = ["Torch"]',
         "tool.envlock.requires.sgl-kernel[0]: found 'Torch'; expected a normalized package name (PEP 751), like "
         '"flashinfer-python"'),
        ('"sgl-kernel" = ["torch"]', '"sgl-kernel" = "torch"',
         "tool.envlock.requires.sgl-kernel: found 'torch'; expected an array"),
        ('{ path = "patches/sglang/0001-x.patch", sha256 = "' + "c" * 64 + '" }', '"patches/sglang/0001-x.patch"',
         "tool.envlock.sources.sglang.patches[0]: found 'patches/sglang/0001-x.patch'; expected a table"),
        ('git = "https://github.com/sgl-project/sglang"', 'gti = "https://github.com/sgl-project/sglang"',
         "tool.envlock.sources.sglang: found neither git nor path; expected one of them"),
        ('input-digest = "', 'input-digests = "',
         "tool.envlock.builds.sgl-kernel.input-digest: missing; expected a string"),
        # What uv or pip would fail on later, with no key to go by.
        ('name = "sgl-kernel"', 'name = "sgl-kernel!!"',
         "packages[1].name: found 'sgl-kernel!!'; expected a normalized package name (PEP 751), like "
         "\"flashinfer-python\""),
        ('name = "sgl-kernel"', 'name = "SGL_Kernel"',
         "packages[1].name: found 'SGL_Kernel'; expected a normalized package name (PEP 751), like "
         "\"flashinfer-python\""),
        ('version = "0.3.21"', 'version = "0.3.21 (patched)"',
         "packages[1].version (package 'sgl-kernel'): found '0.3.21 (patched)'; expected a version (PEP 440), "
         "like \"2.9.1\""),
        ('name = "sgl-kernel"', 'name = "torch"',
         "packages[1].name: found 'torch' again (also packages[0]); expected one entry per package"),
        # What a sync and `lock --check` read and hash: inside the workspace only.
        ('{ path = "patches/sglang/0001-x.patch", sha256', '{ path = "../../etc/x.patch", sha256',
         "tool.envlock.sources.sglang.patches[0].path: found '../../etc/x.patch'; expected a relative path inside "
         "the workspace"),
        ('{ path = "patches/sglang/0001-x.patch", sha256', '{ path = "/etc/hostname", sha256',
         "tool.envlock.sources.sglang.patches[0].path: found '/etc/hostname'; expected a relative path inside "
         "the workspace"),
        ('git = "https://github.com/sgl-project/sglang"', 'path = "/"',
         "tool.envlock.sources.sglang.path: found '/'; expected a relative path inside the workspace"),
        ('python = "3.12"', 'python = "-h"', "tool.envlock.python: found '-h'; expected a Python version like "
         '"3.12"'),
        ("format = 1\n", "",
         "tool.envlock.format: missing; expected 1 (a lock from another envlock version: regenerate it with "
         "`envlock lock`)"),
        # FetchContent pins: exactly the keys envlock writes, a full commit, a sha256.
        ('repo-triton = { git', 'repo-triton = { url = "https://x/t.tar.gz", git',
         "tool.envlock.fetchcontent.sgl-kernel.repo-triton: found both git and url; expected one of them"),
        ('repo-cutlass = { git = "https://github.com/NVIDIA/cutlass", ', 'repo-cutlass = { ',
         "tool.envlock.fetchcontent.sgl-kernel.repo-cutlass: found neither git nor url; expected one of them"),
        ('repo-cutlass = { git = "https://github.com/NVIDIA/cutlass", ',
         'repo-cutlass = { git = "https://github.com/NVIDIA/cutlass", sha256 = "' + "9" * 64 + '", ',
         "tool.envlock.fetchcontent.sgl-kernel.repo-cutlass.sha256: found a key envlock does not write there; "
         "expected only git, commit, rev (a git input)"),
        ('json = { url = "https://github.com/nlohmann/json/archive/v3.11.3.tar.gz", ',
         'json = { url = "https://github.com/nlohmann/json/archive/v3.11.3.tar.gz", rev = "v3.11.3", ',
         "tool.envlock.fetchcontent.sgl-kernel.json.rev: found a key envlock does not write there; expected only "
         "url, sha256 (an archive input)"),
        ('commit = "' + "7" * 40 + '"', 'commit = "v3.5.1"',
         "tool.envlock.fetchcontent.sgl-kernel.repo-triton.commit: found 'v3.5.1'; expected a full 40-hex commit"),
        (', commit = "' + "5" * 40 + '"', '',
         "tool.envlock.fetchcontent.sgl-kernel.repo-cutlass.commit: missing; expected a string"),
        ('sha256 = "' + "9" * 64 + '"', 'sha256 = "' + "9" * 63 + '"',
         "tool.envlock.fetchcontent.sgl-kernel.json.sha256: found '" + "9" * 63 + "'; expected 64 lowercase hex "
         "digits"),
        ('[tool.envlock.fetchcontent."sgl-kernel"]\n', '[tool.envlock.fetchcontent]\n"sgl-kernel" = 1\n[x]\n',
         "tool.envlock.fetchcontent.sgl-kernel: found 1; expected a table"),
        # A package's own envlock table (PEP 751 packages.tool): the reason its release was yanked, only that.
        ('yanked = "bad \\"build\\""', "yanked = true",
         "packages[0].tool.envlock.yanked (package 'torch'): found true; expected a string"),
        ('yanked = "bad \\"build\\""', 'yanked = ""\nwhy = "x"',
         "packages[0].tool.envlock.why (package 'torch'): found a key envlock does not write there; expected only "
         "yanked"),
        ('[packages.tool.envlock]\nyanked = "bad \\"build\\""', "[packages.tool]\nenvlock = 3",
         "packages[0].tool.envlock (package 'torch'): found 3; expected a table"),
    ],
)
def test_malformed_lock_keys_are_named(tmp_path: Path, old: str, new: str, message: str) -> None:
    path, error = _read_edited(tmp_path, old, new)
    assert error.message == f"{path}: {message}"
    assert error.exit_code == 2


def _read_edited(tmp_path: Path, old: str, new: str) -> tuple[Path, LockError]:
    """The sample lock (torch's release recorded yanked) with ``old`` replaced by ``new``, and the
    LockError reading it raises."""
    text = yanked_sample().to_toml()
    assert old in text
    path = tmp_path / "pylock.e.toml"
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(LockError) as info:
        read_lock(path)
    return path, info.value


@pytest.mark.parametrize(
    ("version", "found"),
    [('"2.0"', "'2.0'"), ('"0.9"', "'0.9'"), ('"1"', "'1'"), ('"v1.0"', "'v1.0'"), ("1.0", "1.0 (not a string)")],
)
def test_unsupported_lock_version_is_refused(tmp_path: Path, version: str, found: str) -> None:
    # PEP 751: a reader must raise on a major version it does not support.
    path = tmp_path / "pylock.e.toml"
    path.write_text(sample_lock().to_toml().replace('lock-version = "1.0"', f"lock-version = {version}"))
    with pytest.raises(LockError) as info:
        read_lock(path)
    assert info.value.message == (f'{path}: lock-version: found {found}; expected "1.x" '
                                  "(PEP 751 lock format 1, the one this envlock reads)")
    assert info.value.exit_code == 2


def test_later_minor_lock_version_is_read() -> None:
    text = sample_lock().to_toml().replace('lock-version = "1.0"', 'lock-version = "1.7"')
    assert Lock.from_toml(text, "x") == sample_lock()


def test_missing_lock(tmp_path: Path) -> None:
    with pytest.raises(LockError, match=r"no lock file; create it with `envlock lock x`$"):
        read_lock(tmp_path / "pylock.x.toml")


_INSIDE = ("expected a path from the lock's folder (locks/) to a wheel inside the workspace, as `envlock build` "
           "writes it (../wheelhouse/FILE.whl)")


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("torch-2.12.0.dev20260307%2Bcu130-cp312-cp312-linux_x86_64.whl", "..%2F..%2F..%2Fescaped.whl",
         "packages[0].wheels[0].url (package 'torch'): found 'https://x/..%2F..%2F..%2Fescaped.whl', which names "
         "the file '../../../escaped.whl'; expected a plain *.whl file name"),
        ("torch-2.12.0.dev20260307%2Bcu130-cp312-cp312-linux_x86_64.whl", "x%2F..%2F..%2Fescaped.whl",
         "packages[0].wheels[0].url (package 'torch'): found 'https://x/x%2F..%2F..%2Fescaped.whl', which names "
         "the file 'x/../../escaped.whl'; expected a plain *.whl file name"),
        ("../wheelhouse/sgl_kernel-0.3.21-cp310-abi3-linux_x86_64.whl", "../wheelhouse/..",
         "packages[1].wheels[0].path (package 'sgl-kernel'): found '../wheelhouse/..', which names the file '..'; "
         "expected a plain *.whl file name"),
        ("https://x/torch-2.12.0", "https://[x?torch-2.12.0",
         "packages[0].wheels[0].url (package 'torch'): found 'https://[x?torch-2.12.0.dev20260307%2Bcu130-cp312-"
         "cp312-linux_x86_64.whl'; expected a URL"),
        ('sha256 = "' + "a" * 64, 'sha256 = "../../x' + "a" * 56,
         "packages[0].wheels[0].hashes.sha256 (package 'torch'): found '../../x" + "a" * 56 + "'; expected 64 "
         "lowercase hex digits"),
        ('url = "https://x/torch', 'nothing = "https://x/torch',
         "packages[0].wheels[0] (package 'torch'): found neither url nor path; expected one of them"),
        ("size = 10", 'size = "10"', "packages[1].wheels[0].size (package 'sgl-kernel'): found '10'; expected a "
         "byte count"),
        # A local wheel outside the workspace (a hand-edited lock): read, hashed and installed from there.
        ("../wheelhouse/sgl_kernel", "../../../../elsewhere/sgl_kernel",
         "packages[1].wheels[0].path (package 'sgl-kernel'): found '../../../../elsewhere/sgl_kernel-0.3.21-cp310-"
         "abi3-linux_x86_64.whl', which leaves the workspace; " + _INSIDE),
        ("../wheelhouse/sgl_kernel", "/elsewhere/sgl_kernel",
         "packages[1].wheels[0].path (package 'sgl-kernel'): found '/elsewhere/sgl_kernel-0.3.21-cp310-abi3-linux_"
         "x86_64.whl', which leaves the workspace; " + _INSIDE),
        ("../wheelhouse/sgl_kernel", "../wheelhouse/../../sgl_kernel",
         "packages[1].wheels[0].path (package 'sgl-kernel'): found '../wheelhouse/../../sgl_kernel-0.3.21-cp310-"
         "abi3-linux_x86_64.whl', which leaves the workspace; " + _INSIDE),
    ],
)
def test_wheel_entries_that_could_steer_a_store_path_are_refused(tmp_path: Path, old: str, new: str,
                                                                 message: str) -> None:
    path, error = _read_edited(tmp_path, old, new)
    assert error.message == f"{path}: {message}"


def test_a_lock_nested_too_deeply_is_named(tmp_path: Path) -> None:
    # tomllib recurses per array level: thousands deep was a RecursionError traceback.
    path = tmp_path / "pylock.e.toml"
    path.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(LockError) as info:
        read_lock(path)
    assert info.value.message == f"{path}: not valid TOML: nested too deeply"


def test_a_lock_read_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `--lock /dev/zero` read until the memory ran out.
    import envlock.model.lockfile

    monkeypatch.setattr(envlock.model.lockfile, "MAX_LOCK_BYTES", 1 << 20)
    with pytest.raises(LockError) as info:
        read_lock(Path("/dev/zero"))
    assert info.value.message == "/dev/zero: larger than 1 MiB; not a lock file"


# -- every string a spec can carry reads back as written --------------------------------------------
# The lock writer escapes every character TOML requires escaped (DEL too): any string a spec can
# carry into a lock (source URLs and revs, patch paths, build requirements, spec key paths, index
# URLs, env names ...) reads back as written. A property test over arbitrary strings.

text = st.text()  # every code point but lone surrogates (which no TOML file or spec can hold)
some = st.text(min_size=1)  # the writer leaves out an empty optional value: it reads back as absent
maybe = st.none() | some
workspace_path = st.lists(st.text(st.characters(exclude_characters="/\\", exclude_categories=["Cs"]),
                                  min_size=1).filter(lambda p: p not in (".", "..") and p.strip()),
                          min_size=1, max_size=3).map("/".join)
url_prefix = st.text(st.characters(exclude_characters="?#", exclude_categories=["Cs"]))
sha = st.text("0123456789abcdef", min_size=64, max_size=64)

packages = st.lists(st.tuples(st.sampled_from(["torch", "flashinfer-python", "sgl-kernel", "six"]),
                              url_prefix, sha, maybe),
                    unique_by=lambda p: p[0], max_size=4).map(lambda rows: tuple(
    LockedPackage(canonicalize_name(name), "1.0",
                  (Artifact(sha256=digest, url=f"{prefix}/x-1.0-py3-none-any.whl"),), index)
    for name, prefix, digest, index in rows))

sources = st.dictionaries(text, st.one_of(
    st.builds(LockedSource, kind=st.just("git"), location=text, commit=maybe, rev=maybe, tree_digest=maybe,
              patches=st.lists(st.builds(LockedPatch, path=workspace_path, sha256=text), max_size=3).map(tuple)),
    st.builds(LockedSource, kind=st.just("path"), location=workspace_path, tree_digest=maybe)), max_size=3)

locks = st.builds(
    Lock,
    env=text,
    python=st.sampled_from(["3.11", "3.12", "3.13.1"]),
    platform=maybe,
    spec_digest=text,
    spec_keys=st.dictionaries(text, text, max_size=5),
    packages=packages,
    requires_python=maybe,
    nightlies=st.dictionaries(text, st.builds(NightlyPin, date=text, version=text), max_size=3),
    sources=sources,
    builds=st.dictionaries(text, st.builds(LockedBuild, input_digest=text, wheel=text, sha256=text,
                                           requirements=st.lists(text, max_size=3).map(tuple)), max_size=3),
)


@settings(max_examples=120, deadline=None)
@given(locks)
def test_every_lock_reads_back_as_written(lock: Lock) -> None:
    written = lock.to_toml()
    assert Lock.from_toml(written, "pylock.e.toml") == lock
    assert Lock.from_toml(written, "pylock.e.toml").to_toml() == written  # and writes the same bytes again


@settings(max_examples=300, deadline=None)
@given(text)
def test_every_string_is_a_toml_basic_string(value: str) -> None:
    assert tomllib.loads(f"k = {toml_string(value)}")["k"] == value


def test_del_and_every_control_character_are_escaped() -> None:
    controls = "".join(map(chr, [*range(0x20), 0x7F]))
    written = toml_string(controls)
    assert not any(c in written for c in controls.replace("\t", ""))
    assert "\\u007f" in written
    assert tomllib.loads(f"k = {written}")["k"] == controls
