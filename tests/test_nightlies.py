"""``envlock nightlies``: the dates of each nightly pin, against a hash-less index on loopback
(as download.pytorch.org serves them: no ``#sha256=``), locked with the real uv."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from envlock.commands.lock import lock_env
from envlock.commands.nightlies import list_nightlies, nightlies_env
from envlock.errors import ResolveError, UsageError
from envlock.model.mirrors import Mirrors
from envlock.model.spec import load_env_spec
from envlock.store.store import Store
from envlock.workspace import Workspace
from kit.index import IndexServer
from kit.wheels import build_wheel
from kit.workspaces import Cli, ScratchWorkspace

X86 = "manylinux_2_28_x86_64"
#: The hash-less index's torch nightlies: date -> (local tag, wheel tags). 03-06 has wheels for
#: other platforms only (macOS, aarch64), 03-09 for another python only, 03-08 a +cpu build only.
TORCH_BUILDS = {
    "20260302": ("cu130", (f"cp311-cp311-{X86}",)),
    "20260305": ("cu130", (f"cp311-cp311-{X86}", f"cp312-cp312-{X86}")),
    "20260306": ("cu130", ("cp311-cp311-macosx_11_0_arm64", "cp311-cp311-manylinux_2_28_aarch64")),
    "20260307": ("cu130", (f"cp311-cp311-{X86}",)),
    "20260308": ("cpu", (f"cp311-cp311-{X86}",)),
    "20260309": ("cu130", (f"cp312-cp312-{X86}",)),
    "20260310": ("cu130", (f"cp311-cp311-{X86}",)),
}


@pytest.fixture
def server(server: IndexServer, tmp_path: Path) -> IndexServer:
    """The conftest's loopback index with TORCH_BUILDS on ``pt`` (no hashes, as PyTorch's) and tinydep on ``pypi``."""
    server.add_index("pt", hashes=False)
    wheels = tmp_path / "wheels"
    for date, (local, tags) in TORCH_BUILDS.items():
        for tag in tags:
            server.add("pt", build_wheel(wheels, "torch", f"2.12.0.dev{date}+{local}", tag=tag))
    server.add("pypi", build_wheel(wheels, "tinydep", "1.0"))
    return server


def spec(server: IndexServer, date: str = "2026-03-07", pt_url: str | None = None) -> str:
    return ("[env]\npython = \"3.11\"\nplatform = \"x86_64-manylinux_2_28\"\n"
            f"[indexes.pypi]\nurl = \"{server.url('pypi')}\"\ndefault = true\n"
            f"[indexes.pt]\nurl = \"{pt_url or server.url('pt')}\"\n"
            f'[packages]\ntorch = {{ nightly = "{date}", local = "cu130", index = "pt" }}\ntinydep = "==1.0"\n')


def _drop(server: IndexServer, date: str) -> None:
    """The index forgets a date (as PyTorch's keeps ~60 nightlies)."""
    for filename in [f for f in server.indexes["pt"].files if f".dev{date.replace('-', '')}+" in f]:
        del server.indexes["pt"].files[filename]


def test_the_listing_marks_usable_other_platform_locked_pinned_and_kept_dates(
        ws: ScratchWorkspace, cli: Cli, server: IndexServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws.write_spec("e", spec(server, "2026-03-02"))
    lock_env(Workspace(ws.root), "e")
    url = server.url("pt")
    result = cli("nightlies", "e")
    assert result.code == 0, result.err
    assert result.out == "\n".join([
        f"torch: index 'pt' ({url}), local tag +cu130; for python 3.11 on x86_64-manylinux_2_28",
        "  2026-03-10  usable           2.12.0.dev20260310+cu130",
        "  2026-03-09  other platforms  2.12.0.dev20260309+cu130  no wheel for the target: has "
        "manylinux_2_28_x86_64 (cp312)",
        "  2026-03-07  usable           2.12.0.dev20260307+cu130",
        "  2026-03-06  other platforms  2.12.0.dev20260306+cu130  no wheel for the target: has "
        "macosx_11_0_arm64 (cp311), manylinux_2_28_aarch64 (cp311)",
        "  2026-03-05  usable           2.12.0.dev20260305+cu130",
        "  2026-03-02  usable           2.12.0.dev20260302+cu130  locked, pinned",
        "  6 dates listed (2026-03-02 .. 2026-03-10), 4 usable for the target",
    ]) + "\n"

    # The index drops the locked date; the store keeps its wheel (the lock hashed it there), and
    # the spec moves on without a relock yet: 03-07 is pinned, 03-02 still locked, and kept.
    _drop(server, "2026-03-02")
    ws.write_spec("e", spec(server, "2026-03-07"))
    result = cli("nightlies", "e", "torch", "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc == {
        "env": "e", "python": "3.11", "platform": "x86_64-manylinux_2_28",
        "lock": str(ws.root / "locks" / "pylock.e.toml"), "note": "",
        "packages": [{
            "name": "torch", "index": "pt", "index_url": url, "local": "cu130", "same_date": True,
            "pinned": "2026-03-07", "locked": {"date": "2026-03-02", "version": "2.12.0.dev20260302+cu130"},
            "dates": [_date("2026-03-10", "usable", (f"cp311-cp311-{X86}",)),
                      _date("2026-03-09", "other-platforms", (f"cp312-cp312-{X86}",)),
                      _date("2026-03-07", "usable", (f"cp311-cp311-{X86}",), pinned=True),
                      _date("2026-03-06", "other-platforms",
                            ("cp311-cp311-macosx_11_0_arm64", "cp311-cp311-manylinux_2_28_aarch64")),
                      _date("2026-03-05", "usable", (f"cp311-cp311-{X86}", f"cp312-cp312-{X86}")),
                      _date("2026-03-02", "kept", (f"cp311-cp311-{X86}",), locked=True)],
        }],
    }
    text = cli("nightlies", "e").out.splitlines()
    assert text[-2:] == [
        "  2026-03-02  kept             2.12.0.dev20260302+cu130  locked; the index dropped it, the store keeps its "
        "wheel (a relock keeps it)",
        "  5 dates listed (2026-03-05 .. 2026-03-10), 3 usable for the target, 1 kept in the store"]

    # Another machine (a fresh store): the locked date is gone for good, and said so.
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "fresh-home"))
    listing = nightlies_env(Workspace(ws.root), "e", "torch")
    assert listing.packages[0].dates[-1].to_dict() == {**_date("2026-03-02", "unlisted", (), locked=True),
                                                       "usable": False}
    assert cli("nightlies", "e").out.splitlines()[-2] == (
        "  2026-03-02  unlisted         2.12.0.dev20260302+cu130  locked; not listed; a lock of it fails "
        "(the store lacks its wheel: a mirror, --index pt=URL)")


def _date(date: str, status: str, wheels: tuple[str, ...], *, locked: bool = False,
          pinned: bool = False) -> dict[str, object]:
    platforms = sorted({w.rsplit("-", 1)[1] for w in wheels})
    pythons = sorted({w.split("-")[0] for w in wheels})
    return {"date": date, "status": status, "version": f"2.12.0.dev{date.replace('-', '')}+cu130",
            "locked": locked, "pinned": pinned, "usable": status in ("usable", "kept"), "wheels": list(wheels),
            "platforms": platforms, "pythons": pythons}


def test_newest_usable_date_of_an_index_is_what_upgrade_takes(ws: ScratchWorkspace, server: IndexServer) -> None:
    ws.write_spec("e", spec(server))
    listing = list_nightlies(Workspace(ws.root), load_env_spec(Workspace(ws.root), "e"),
                             Mirrors.of(load_env_spec(Workspace(ws.root), "e")), store=Store.open(create=False))
    assert listing.packages[0].usable_dates() == ("2026-03-10", "2026-03-07", "2026-03-05", "2026-03-02")
    assert listing.newest_usable("pt") == "2026-03-10"
    assert listing.newest_usable("pypi") is None
    assert listing.note == "no lock at locks/pylock.e.toml: nothing is marked locked (`envlock lock e`)"


@pytest.mark.parametrize(("date", "message"), [
    # Listed, but with wheels for other platforms only: which, and the target's nearest dates.
    ("2026-03-06", "packages.torch.nightly: index 'pt' ({url}) lists torch nightlies dated 2026-03-06, but none with "
                   "a wheel for python 3.11 on x86_64-manylinux_2_28: that date has macosx_11_0_arm64 (cp311), "
                   "manylinux_2_28_aarch64 (cp311) only; nearest dates with a wheel for python 3.11 on "
                   "x86_64-manylinux_2_28: 2026-03-05 before, 2026-03-07 after"),
    # Another python only: the nearest usable date after it is not the next listed one (03-09 is cp312's).
    ("2026-03-09", "packages.torch.nightly: index 'pt' ({url}) lists torch nightlies dated 2026-03-09, but none with "
                   "a wheel for python 3.11 on x86_64-manylinux_2_28: that date has manylinux_2_28_x86_64 (cp312) "
                   "only; nearest dates with a wheel for python 3.11 on x86_64-manylinux_2_28: 2026-03-07 before, "
                   "2026-03-10 after"),
    # Listed with another local tag only.
    ("2026-03-08", "packages.torch.nightly: no nightly with local tag +cu130 dated 2026-03-08 on index 'pt' ({url}); "
                   "that date is listed with +cpu only; listed range 2026-03-02 .. 2026-03-10; nearest dates with a "
                   "wheel for python 3.11 on x86_64-manylinux_2_28: 2026-03-07 before, 2026-03-10 after"),
    # Newer than anything listed.
    ("2026-03-11", "packages.torch.nightly: no nightly with local tag +cu130 dated 2026-03-11 on index 'pt' ({url}); "
                   "listed range 2026-03-02 .. 2026-03-10; nearest dates with a wheel for python 3.11 on "
                   "x86_64-manylinux_2_28: 2026-03-10 before, none after"),
    # Older than anything listed: the index forgot it.
    ("2026-02-20", "packages.torch.nightly: no nightly with local tag +cu130 dated 2026-02-20 on index 'pt' ({url}); "
                   "listed range 2026-03-02 .. 2026-03-10; nearest dates with a wheel for python 3.11 on "
                   "x86_64-manylinux_2_28: none before, 2026-03-02 after. Indexes such as PyTorch's keep only their "
                   "~60 newest nightlies: an older pin needs a mirror (--index NAME=URL), or a relock of a lock that "
                   "pinned this date, with its wheels in the store"),
])
def test_a_lock_of_a_missing_or_unusable_date_names_the_nearest_usable_dates(
        ws: ScratchWorkspace, server: IndexServer, date: str, message: str) -> None:
    path = ws.write_spec("e", spec(server, date))
    with pytest.raises(ResolveError) as info:
        lock_env(Workspace(ws.root), "e")
    assert info.value.message == f"{path}: " + message.format(url=server.url("pt"))
    assert info.value.details == ("`envlock nightlies e torch` lists every date the index has, and its platforms",)


def test_the_lock_error_on_the_command_line(ws: ScratchWorkspace, cli: Cli, server: IndexServer) -> None:
    path = ws.write_spec("e", spec(server, "2026-03-06"))
    result = cli("lock", "e")
    assert result.code == 1
    assert result.err.splitlines()[1:] == [
        "  `envlock nightlies e torch` lists every date the index has, and its platforms"]
    assert result.err.startswith(f"envlock: error: {path}: packages.torch.nightly: index 'pt' ")


@pytest.mark.parametrize(("package", "message"), [
    ("tinydep", "{spec}: packages.tinydep is not a nightly pin (expected a package with nightly = \"YYYY-MM-DD\"; "
                "nightly pins: torch)"),
    ("torhc", "{spec}: no package 'torhc' in [packages]; did you mean 'torch'? (nightly pins: torch)"),
])
def test_a_package_that_is_no_nightly_pin_is_a_usage_error(
        ws: ScratchWorkspace, cli: Cli, server: IndexServer, package: str, message: str) -> None:
    path = ws.write_spec("e", spec(server))
    with pytest.raises(UsageError) as info:
        nightlies_env(Workspace(ws.root), "e", package)
    assert info.value.message == message.format(spec=path)
    result = cli("nightlies", "e", package, "--json")
    assert result.code == 2
    assert json.loads(result.out)["error"]["message"] == message.format(spec=path)


def test_an_env_without_nightly_pins(ws: ScratchWorkspace, cli: Cli, server: IndexServer) -> None:
    ws.write_spec("e", spec(server).replace('torch = { nightly = "2026-03-07", local = "cu130", index = "pt" }\n', ""))
    result = cli("nightlies", "e")
    assert (result.code, result.out) == (0, "envs/e.toml pins no nightly\n")


def test_the_index_is_read_through_a_mirror_and_with_its_credentials(
        ws: ScratchWorkspace, cli: Cli, server: IndexServer) -> None:
    ws.write_spec("e", spec(server, pt_url="https://download.pytorch.org/whl/nightly/cu130"))
    # Unreachable (the tests' proxy is a closed port): the error says how to read it from a mirror.
    result = cli("nightlies", "e")
    assert result.code == 1
    assert result.err.splitlines()[-1] == (
        "  no access to that host? read its index from a mirror: --index pt=URL or ENVLOCK_INDEX_PT=URL")
    result = cli("nightlies", "e", "--index", f"pt={server.url('pt')}", "--json")
    assert result.code == 0, result.err
    package = json.loads(result.out)["packages"][0]
    assert (package["index_url"], package["dates"][0]["date"]) == (server.url("pt"), "2026-03-10")
    # A private index (a request without its user:password@ gets a 401): they are sent, never shown.
    server.required_auth = "Basic " + base64.b64encode(b"alice:s3cret").decode()
    private = server.url("pt").replace("http://", "http://alice:s3cret@")
    ws.write_spec("e", spec(server, pt_url=private))
    result = cli("nightlies", "e")
    assert result.code == 0, result.err
    assert "s3cret" not in result.out + result.err
    assert result.out.startswith(f"torch: index 'pt' ({server.url('pt')}), local tag +cu130;")


def test_help_teaches_the_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    from envlock.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(["nightlies", "--help"])
    assert info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for words in ("usable (a wheel for the spec's python and platform)", "other platforms (wheels for other",
                  "kept (the index dropped the locked date, the store keeps its wheel", "writes nothing",
                  "ENVLOCK_INDEX_<NAME>=URL", "[PKG]"):
        assert words in out


def test_newest_usable_is_the_newest_date_every_nightly_of_the_index_sharing_it_can_take() -> None:
    from envlock.commands.nightlies import NightlyListing, PackageNightlies
    from envlock.resolution.nightly import NightlyDate

    def package(name: str, usable: tuple[str, ...], *, same_date: bool = True, index: str = "pt") -> PackageNightlies:
        dates = tuple(NightlyDate(date=d, status="usable", version=f"1.0.dev{d.replace('-', '')}") for d in usable)
        return PackageNightlies(name=name, index=index, index_url="https://example.invalid/pt", local=None,
                                same_date=same_date, pinned=usable[-1], locked=None,
                                dates=(*dates, NightlyDate(date="2026-03-11", status="other-platforms", version="x")))

    listing = NightlyListing(env="e", python="3.11", platform=None, lock=None, packages=(
        package("torch", ("2026-03-10", "2026-03-07", "2026-03-05")),
        package("torchvision", ("2026-03-07", "2026-03-05")),  # its 03-10 build is missing
        package("pytorch-triton-xpu", ("2026-03-01",), same_date=False),  # opted out of the shared date
        package("other", ("2026-03-09",), index="nv"),
    ))
    assert listing.newest_usable("pt") == "2026-03-07"
    assert listing.newest_usable("nv") == "2026-03-09"
    assert listing.newest_usable("pypi") is None
