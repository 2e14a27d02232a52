"""The pure nightly functions: which dates a target can use, how a date's files read, and what a
pin whose date is missing or unusable is told (exact text)."""

from __future__ import annotations

import pytest
from packaging.version import Version

from envlock.model.lockfile import NightlyPin
from envlock.model.target import target_tags
from envlock.net.indexes import IndexFile
from envlock.resolution.nightly import DatePin, date_error, describe_tags, list_dates, usable_files, wheel_tag

X86 = "manylinux_2_28_x86_64"
TAGS = target_tags("3.11", "x86_64-manylinux_2_28")


def _files(*names: str) -> list[IndexFile]:
    out = []
    for name in names:
        version = name.removesuffix(".tar.gz").split("-")[1]
        out.append(IndexFile(filename=name, url=f"https://example.invalid/{name}", version=Version(version),
                             sha256=None))
    return out


#: torch nightlies: 03-01 for the target; 03-03 macOS and aarch64 only; 03-04 two builds, the later
#: one cp312's only; 03-05 +cpu only; 03-06 an sdist only.
FILES = _files(
    f"torch-2.12.0.dev20260301+cu130-cp311-cp311-{X86}.whl",
    "torch-2.12.0.dev20260303+cu130-cp311-cp311-macosx_11_0_arm64.whl",
    "torch-2.12.0.dev20260303+cu130-cp312-cp312-manylinux_2_28_aarch64.whl",
    f"torch-2.12.0.dev2026030401+cu130-cp311-cp311-{X86}.whl",
    f"torch-2.12.0.dev2026030423+cu130-cp312-cp312-{X86}.whl",
    f"torch-2.12.0.dev20260305+cpu-cp311-cp311-{X86}.whl",
    "torch-2.12.0.dev20260306+cu130.tar.gz",
)


@pytest.mark.parametrize(("tags", "text"), [
    ([f"cp311-cp311-{X86}", f"cp312-cp312-{X86}"], f"{X86} (cp311, cp312)"),
    (["cp311-cp311-macosx_11_0_arm64", f"cp39-abi3-{X86}"], f"macosx_11_0_arm64 (cp311), {X86} (cp39-abi3)"),
    (["py3-none-any", "sdist"], "any (py3), sdist (no wheel)"),
    (["cp313-cp313t-manylinux_2_17_x86_64.manylinux2014_x86_64"],
     "manylinux_2_17_x86_64.manylinux2014_x86_64 (cp313-cp313t)"),
    ([], "no file"),
])
def test_describe_tags(tags: list[str], text: str) -> None:
    assert describe_tags(tags) == text


def test_wheel_tag_is_the_file_names_own_spelling() -> None:
    assert wheel_tag("torch-2.12.0.dev20260301+cu130-cp311-cp311-manylinux_2_28_x86_64.whl") == f"cp311-cp311-{X86}"
    assert wheel_tag("torch-2.12.0.tar.gz") == "sdist"


def test_the_dates_as_the_target_sees_them() -> None:
    dates = list_dates(FILES, local="cu130", tags=TAGS, pinned="2026-03-04",
                       locked=NightlyPin("2026-02-20", "2.12.0.dev20260220+cu130"),
                       kept_wheel=f"torch-2.12.0.dev20260220+cu130-cp311-cp311-{X86}.whl")
    assert [(d.date, d.status, d.version, d.locked, d.pinned, d.platforms()) for d in dates] == [
        ("2026-03-06", "other-platforms", "2.12.0.dev20260306+cu130", False, False, "sdist (no wheel)"),
        # The day's latest build the target installs, not the day's latest (cp312's).
        ("2026-03-04", "usable", "2.12.0.dev2026030401+cu130", False, True, f"{X86} (cp311, cp312)"),
        ("2026-03-03", "other-platforms", "2.12.0.dev20260303+cu130", False, False,
         "macosx_11_0_arm64 (cp311), manylinux_2_28_aarch64 (cp312)"),
        ("2026-03-01", "usable", "2.12.0.dev20260301+cu130", False, False, f"{X86} (cp311)"),
        ("2026-02-20", "kept", "2.12.0.dev20260220+cu130", True, False, f"{X86} (cp311)"),
    ]
    assert [d.usable for d in dates] == [False, True, False, True, True]


def test_a_date_only_the_spec_or_the_lock_names() -> None:
    dates = list_dates(FILES, local="cu130", tags=TAGS, pinned="2026-03-10",
                       locked=NightlyPin("2026-02-20", "2.12.0.dev20260220+cu130"))
    assert [(d.date, d.status, d.version, d.locked, d.pinned) for d in dates if d.status == "unlisted"] == [
        ("2026-03-10", "unlisted", None, False, True), ("2026-02-20", "unlisted", "2.12.0.dev20260220+cu130", True,
                                                        False)]


def test_a_platform_not_ranked_takes_every_file_as_uv_decides_there() -> None:
    assert usable_files(FILES, None) == FILES
    assert [d.status for d in list_dates(FILES, local="cu130", tags=None)] == ["usable"] * 4


def _pin(date: str, python: str = "3.11", local: str | None = "cu130") -> DatePin:
    return DatePin(env="e", key="envs/e.toml: packages.torch.nightly", package="torch", date=date, local=local,
                   index_name="pt", index_url="https://example.invalid/pt", python=python,
                   platform="x86_64-manylinux_2_28")


@pytest.mark.parametrize(("pin", "message"), [
    (_pin("2026-03-03"), "envs/e.toml: packages.torch.nightly: index 'pt' (https://example.invalid/pt) lists torch "
     "nightlies dated 2026-03-03, but none with a wheel for python 3.11 on x86_64-manylinux_2_28: that date has "
     "macosx_11_0_arm64 (cp311), manylinux_2_28_aarch64 (cp312) only; nearest dates with a wheel for python 3.11 "
     "on x86_64-manylinux_2_28: 2026-03-01 before, 2026-03-04 after"),
    (_pin("2026-03-06"), "envs/e.toml: packages.torch.nightly: index 'pt' (https://example.invalid/pt) lists torch "
     "nightlies dated 2026-03-06, but none with a wheel for python 3.11 on x86_64-manylinux_2_28: that date has "
     "sdist (no wheel) only; nearest dates with a wheel for python 3.11 on x86_64-manylinux_2_28: 2026-03-04 "
     "before, none after"),
    (_pin("2026-03-05"), "envs/e.toml: packages.torch.nightly: no nightly with local tag +cu130 dated 2026-03-05 on "
     "index 'pt' (https://example.invalid/pt); that date is listed with +cpu only; listed range 2026-03-01 .. "
     "2026-03-06; nearest dates with a wheel for python 3.11 on x86_64-manylinux_2_28: 2026-03-04 before, none "
     "after"),
    (_pin("2026-03-02", python="3.13"), "envs/e.toml: packages.torch.nightly: no nightly with local tag +cu130 dated "
     "2026-03-02 on index 'pt' (https://example.invalid/pt); listed range 2026-03-01 .. 2026-03-06; no listed date "
     "has a wheel for python 3.13 on x86_64-manylinux_2_28: they have macosx_11_0_arm64 (cp311), "
     f"manylinux_2_28_aarch64 (cp312), {X86} (cp311, cp312), sdist (no wheel)"),
    (_pin("2026-03-02", local="cu129"), "envs/e.toml: packages.torch.nightly: no nightly with local tag +cu129 is "
     "listed on index 'pt' (https://example.invalid/pt); check the package name, the index and the local tag"),
])
def test_the_error_for_a_date_names_the_nearest_usable_dates(pin: DatePin, message: str) -> None:
    tags = target_tags(pin.python, pin.platform)
    error = date_error(pin, FILES, tags)
    assert error.message == message
