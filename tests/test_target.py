"""The target platform: tags ranked for a python and platform, marker values, the wheel it installs,
a wheel's requirements, the interpreter for a python version."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest
from packaging.tags import Tag
from packaging.version import Version

from envlock.errors import InstallError
from envlock.model import target
from envlock.net.indexes import IndexFile
from kit.wheels import build_wheel


def test_a_manylinux_target_ranks_its_own_glibc_first_and_knows_the_legacy_names() -> None:
    tags = target.target_tags("3.12", "x86_64-manylinux_2_28")
    assert tags is not None
    assert tags[0] == Tag("cp312", "cp312", "manylinux_2_28_x86_64")
    platforms = {t.platform for t in tags}
    assert {"manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"} <= platforms
    # aarch64 has no manylinux2010 or manylinux1 (only manylinux2014, glibc 2.17).
    arm = {t.platform for t in target.target_tags("3.12", "aarch64-manylinux_2_17") or []}
    assert "manylinux2014_aarch64" in arm and "manylinux2010_aarch64" not in arm
    assert Tag("py3", "none", "any") in tags


@pytest.mark.parametrize("python, platform", [("3.12", "x86_64-apple-darwin"), ("3.12", "windows")])
def test_a_platform_form_not_ranked_here_is_left_to_uv(python: str, platform: str) -> None:
    assert target.target_tags(python, platform) is None


def test_with_no_platform_only_this_pythons_host_tags_are_known() -> None:
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert target.target_tags(running, None)
    assert target.target_tags("3.1", None) is None


def test_the_wheel_the_target_installs_is_the_best_ranked_one() -> None:
    tags = target.target_tags("3.12", "x86_64-manylinux_2_28")
    files = [IndexFile(filename=name, url=f"https://i/{name}", version=Version("1.0"), sha256=None)
             for name in ("x-1.0-py3-none-any.whl", "x-1.0-cp312-cp312-manylinux_2_17_x86_64.whl",
                          "x-1.0-cp311-cp311-manylinux_2_17_x86_64.whl", "x-1.0.tar.gz",
                          "x-1.0-cp312-cp312-manylinux_2_31_x86_64.whl")]
    usable = target.for_target(files, tags)
    assert [f.filename for f in usable] == ["x-1.0-py3-none-any.whl", "x-1.0-cp312-cp312-manylinux_2_17_x86_64.whl"]
    assert target.best_file(usable, tags).filename == "x-1.0-cp312-cp312-manylinux_2_17_x86_64.whl"
    assert target.best_wheel([f.filename for f in usable], None) == 0  # not ranked: the first
    assert len(target.for_target(files, None)) == 4  # every wheel


def test_marker_values_are_the_targets_not_this_hosts() -> None:
    markers = target.target_markers("3.12", "aarch64-manylinux_2_28")
    assert markers is not None
    assert (markers["platform_machine"], markers["sys_platform"], markers["python_version"],
            markers["python_full_version"]) == ("aarch64", "linux", "3.12", "3.12.0")
    assert target.target_markers("3.12", "x86_64-apple-darwin") is None
    host = target.target_environment("3.12.4", "x86_64-apple-darwin")  # unread form: this host's platform values
    assert host["python_full_version"] == "3.12.4" and host["sys_platform"] == sys.platform


def test_requires_dist_reads_the_metadata_and_names_a_file_that_is_no_wheel(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path, "top", "1.0", requires=["dep==2.0", "other; sys_platform == 'win32'"])
    assert [str(r) for r in target.requires_dist(wheel)] == ["dep==2.0", 'other; sys_platform == "win32"']
    empty = tmp_path / "empty-1.0-py3-none-any.whl"
    with zipfile.ZipFile(empty, "w") as zf:
        zf.writestr("empty/__init__.py", "")
    with pytest.raises(ValueError) as info:
        target.requires_dist(empty)
    assert str(info.value) == f"{empty}: not a wheel (expected one .dist-info/METADATA, found 0)"
    bad = tmp_path / "bad-1.0-py3-none-any.whl"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("bad-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: bad\nRequires-Dist: ==oops\n\n")
    with pytest.raises(ValueError, match=r"bad-1\.0-py3-none-any\.whl: a Requires-Dist of its METADATA does not "
                                         r"parse \("):
        target.requires_dist(bad)


def test_the_running_interpreter_stands_for_its_own_version() -> None:
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    found = target.find_python(running)
    assert found.name in (f"python{running}", Path(sys.executable).name) and found.exists()
    assert target.find_python(f"{running}.{sys.version_info.micro}") == found


def test_a_python_not_on_this_machine_is_never_downloaded() -> None:
    with pytest.raises(InstallError) as info:
        target.find_python("3.4")
    assert info.value.message == ("python 3.4 (the lock's python) is not available on this machine; envlock never "
                                  "downloads interpreters (UV_PYTHON_DOWNLOADS=never): install it, or lock the env "
                                  "for a python that is here")
