"""PEP 592 on loopback: a yanked newest release is never chosen, unless pinned with == exactly:
not by uv's resolution (the index tells uv too), not by envlock's choice of a date's nightly. An
exact pin of a yanked release is recorded in the lock; a release yanked after the lock is noted by
``lock --check`` and ``diff --yanked`` (the index's JSON and HTML pages alike), never failed."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.pylock import Pylock

from envlock.model.lockfile import read_lock
from kit.index import IndexServer
from kit.wheels import build_wheel
from kit.workspaces import Cli, ScratchWorkspace

PY = f"{sys.version_info.major}.{sys.version_info.minor}"


TINYDEP2 = "tinydep-2.0-py3-none-any.whl"
NIGHTLY = "torch-2.12.0.dev2026031001+cpu-py3-none-any.whl"


@pytest.fixture
def fresh(server: IndexServer, tmp_path: Path) -> IndexServer:
    """tinydep 1.0 and 2.0 on ``pypi``, two torch nightlies of one date on ``nightly`` (no hashes, as
    PyTorch's: envlock picks the date's build), nothing yanked yet: a lock takes tinydep 2.0 and the
    date's newest torch."""
    server.add_index("nightly", hashes=False)
    for version in ("1.0", "2.0"):
        server.add("pypi", build_wheel(tmp_path / "wheels", "tinydep", version))
    for version in ("2.12.0.dev20260310+cpu", "2.12.0.dev2026031001+cpu"):
        server.add("nightly", build_wheel(tmp_path / "wheels", "torch", version))
    return server


@pytest.fixture
def index(fresh: IndexServer) -> IndexServer:
    """The same indexes with the newest of each yanked: tinydep 2.0 (with a reason) and the date's newest torch."""
    fresh.yanked[TINYDEP2] = "broken"
    fresh.yanked[NIGHTLY] = ""
    return fresh


def _spec(server: IndexServer, tinydep: str) -> str:
    return (f'[env]\npython = "{PY}"\n[indexes.pypi]\nurl = "{server.url("pypi")}"\ndefault = true\n'
            f'[indexes.nightly]\nurl = "{server.url("nightly")}"\n'
            f'[packages]\ntinydep = "{tinydep}"\n'
            'torch = { nightly = "2026-03-10", local = "cpu", index = "nightly" }\n')


@pytest.mark.parametrize(("tinydep", "locked"), [(">=1.0", "1.0"), ("==2.0", "2.0")])
def test_a_yanked_newest_release_is_taken_only_when_pinned_exactly(index: IndexServer, ws: ScratchWorkspace, cli: Cli,
                                                                   tinydep: str, locked: str) -> None:
    ws.write_spec("e", _spec(index, tinydep))
    result = cli("-q", "lock", "e")
    assert result.code == 0, result.err
    lock = read_lock(ws.root / "locks" / "pylock.e.toml")
    versions: dict[str, str] = {p.name: p.version for p in lock.packages}
    assert versions["tinydep"] == locked
    # The date's newest build is yanked: the one before it on that date is the pin.
    assert versions["torch"] == "2.12.0.dev20260310+cpu"
    assert lock.nightlies["torch"].version == "2.12.0.dev20260310+cpu"


# -- a locked release yanked since, and an == pin of a yanked one -----------------------------------

def _page_requests(server: IndexServer) -> list[str]:
    return sorted(path for path, _ in server.requests if "/simple/" in path and path.count("/") == 4)


@pytest.mark.parametrize("page", ["json", "html"])
def test_lock_check_notes_a_locked_release_yanked_since(
        fresh: IndexServer, ws: ScratchWorkspace, cli: Cli, page: str) -> None:
    if page == "html":  # PEP 503 data-yanked instead of PEP 691 "yanked"
        fresh.html_only |= {"pypi", "nightly"}
    ws.write_spec("e", _spec(fresh, ">=1.0"))
    assert cli("-q", "lock", "e").code == 0
    assert cli("lock", "e", "--check").err == ""  # nothing yanked: nothing said
    fresh.yanked[TINYDEP2] = "broken metadata"
    fresh.yanked[NIGHTLY] = ""
    fresh.requests.clear()
    check = cli("lock", "e", "--check")
    assert (check.code, check.out) == (0, "locks/pylock.e.toml is current for envs/e.toml\n")
    assert check.err == (
        f"envlock: note: tinydep 2.0: {TINYDEP2} is yanked on {fresh.url('pypi')} (reason: broken metadata)\n"
        f"envlock: note: torch 2.12.0.dev2026031001+cpu: {NIGHTLY} is yanked on {fresh.url('nightly')} "
        "(no reason given)\n")
    # One page per locked package, at the index it is pinned to; no file downloaded.
    assert _page_requests(fresh) == ["/nightly/simple/torch/", "/pypi/simple/tinydep/"]
    assert fresh.downloads() == []
    doc = json.loads(cli("lock", "e", "--check", "--json").out)
    assert doc["current"] is True and doc["reasons"] == []
    assert doc["yanked"] == [
        {"package": "tinydep", "version": "2.0", "file": TINYDEP2, "index": fresh.url("pypi"),
         "reason": "broken metadata", "recorded": False, "live": True},
        {"package": "torch", "version": "2.12.0.dev2026031001+cpu", "file": NIGHTLY, "index": fresh.url("nightly"),
         "reason": "", "recorded": False, "live": True},
    ]
    assert len(doc["notes"]) == 2
    # A stale lock stays stale (exit 1) for its drift alone; the yanks are said beside it.
    ws.write_spec("e", _spec(fresh, ">=0.5"))
    stale = cli("lock", "e", "--check")
    assert stale.code == 1 and stale.out.splitlines()[:2] == ["locks/pylock.e.toml is stale:",
                                                              "  packages.tinydep: changed"]
    assert stale.err.count("envlock: note: ") == 2


def test_lock_check_offline_and_with_the_index_down(fresh: IndexServer, ws: ScratchWorkspace, cli: Cli) -> None:
    ws.write_spec("e", _spec(fresh, ">=1.0"))
    assert cli("-q", "lock", "e").code == 0
    fresh.yanked[TINYDEP2] = "broken"
    before = len(fresh.requests)
    offline = cli("lock", "e", "--check", "--offline")
    assert (offline.code, offline.out) == (0, "locks/pylock.e.toml is current for envs/e.toml\n")
    assert offline.err == ("envlock: note: --offline: no index read, so the locked files were not checked for "
                           "yanks (PEP 592)\n")
    assert len(fresh.requests) == before  # no network at all
    doc = json.loads(cli("lock", "e", "--check", "--offline", "--json").out)
    assert (doc["yanked"], doc["notes"]) == ([], [
        "--offline: no index read, so the locked files were not checked for yanks (PEP 592)"])
    refused = cli("lock", "e", "--offline")
    assert (refused.code, refused.err) == (2, "envlock: error: --offline: `envlock lock` resolves against the "
                                              "indexes; only `envlock lock ENV --check --offline` runs without "
                                              "the network\n")
    pypi, nightly = fresh.url("pypi"), fresh.url("nightly")
    fresh.stop()
    down = cli("lock", "e", "--check")
    assert (down.code, down.out) == (0, "locks/pylock.e.toml is current for envs/e.toml\n")
    refused_connection = "cannot connect (ConnectionRefusedError: [Errno 111] Connection refused)"
    assert down.err == (
        f"envlock: note: 1 locked file of {nightly} not checked for yanks: {nightly}/torch/: cannot read the index "
        f"page: {refused_connection}\n"
        f"envlock: note: 1 locked file of {pypi} not checked for yanks: {pypi}/tinydep/: cannot read the index "
        f"page: {refused_connection}\n")


def test_an_exact_pin_of_a_yanked_release_is_recorded_and_relocks_byte_identically(
        index: IndexServer, ws: ScratchWorkspace, cli: Cli) -> None:
    ws.write_spec("e", _spec(index, "==2.0"))
    made = cli("lock", "e")
    assert made.code == 0, made.err
    assert made.out.splitlines()[-1] == (
        f"  note: tinydep 2.0: {TINYDEP2} is yanked on {index.url('pypi')} (reason: broken); locked because "
        "pinned exactly (==), recorded in the lock ([packages.tool.envlock] yanked)")
    text = ws.lock_text("e")
    start = text.index('name = "tinydep"')
    assert text[start:text.index("[[packages]]", start)].endswith(
        ']\n\n[packages.tool.envlock]\nyanked = "broken"\n\n')
    assert text.count("[packages.tool.envlock]") == 1  # torch: the date's build that is not yanked
    Pylock.from_dict(tomllib.loads(text))  # still PEP 751
    lock = read_lock(ws.root / "locks" / "pylock.e.toml")
    assert {p.name: p.yanked for p in lock.packages} == {"tinydep": "broken", "torch": None}
    again = cli("lock", "e")
    assert again.out.splitlines()[0] == "unchanged: locks/pylock.e.toml (2 packages)"
    assert ws.lock_text("e") == text
    check = cli("lock", "e", "--check")
    assert (check.code, check.err) == (0, f"envlock: note: tinydep 2.0: {TINYDEP2} is yanked on {index.url('pypi')} "
                                          "(reason: broken) (yanked already when locked: pinned ==)\n")
    # uv installs from it as it is (PEP 751 packages.tool is the tools' own).
    target = ws.root / "venv"
    from envlock import runner

    assert runner.uv(["venv", "-q", str(target)]).ok
    installed = runner.uv(["pip", "install", "-q", "--python", str(target / "bin" / "python"), "-r",
                           str(ws.root / "locks" / "pylock.e.toml")])
    assert installed.ok, installed.stderr


def test_diff_shows_the_new_locks_yanked_files(fresh: IndexServer, ws: ScratchWorkspace, cli: Cli) -> None:
    ws.write_spec("e", _spec(fresh, "==1.0"))
    assert cli("-q", "lock", "e").code == 0
    (ws.root / "locks" / "old.toml").write_text(ws.lock_text("e"))
    ws.write_spec("e", _spec(fresh, ">=1.0"))
    assert cli("-q", "lock", "e").code == 0  # tinydep 2.0, not yanked yet
    (ws.root / "locks" / "mid.toml").write_text(ws.lock_text("e"))
    fresh.yanked[TINYDEP2] = "broken"
    before = len(fresh.requests)
    plain = cli("diff", "locks/old.toml", "locks/mid.toml")
    assert plain.code == 0 and "yanked" not in plain.out  # offline by default: the lock records none
    assert len(fresh.requests) == before
    fresh.requests.clear()
    live = cli("diff", "locks/old.toml", "locks/mid.toml", "--yanked")
    lines = live.out.splitlines()
    assert lines[lines.index("yanked:") - 2:lines.index("yanked:") + 3] == [
        "packages:",
        "  ~ tinydep 1.0 -> 2.0 [size unknown -> size unknown]  (packages.tinydep edited in the spec)",
        "yanked:",
        f"  ! tinydep 2.0: {TINYDEP2} is yanked on {fresh.url('pypi')} (reason: broken)",
        lines[lines.index("yanked:") + 2],
    ]
    assert lines[lines.index("yanked:") + 2].startswith("download: ")
    assert _page_requests(fresh) == ["/nightly/simple/torch/", "/pypi/simple/tinydep/"]
    doc = json.loads(cli("diff", "locks/old.toml", "locks/mid.toml", "--yanked", "--json").out)
    assert [(y["package"], y["reason"], y["recorded"], y["live"]) for y in doc["yanked"]] == [
        ("tinydep", "broken", False, True)]
    # An == pin of the yanked release: the new lock records it, and diff says so with no network.
    ws.write_spec("e", _spec(fresh, "==2.0"))
    assert cli("-q", "lock", "e").code == 0
    before = len(fresh.requests)
    recorded = cli("diff", "locks/mid.toml", "e")
    assert (recorded.code, recorded.out) == (0, (
        "no differences (2 packages identical)\nyanked:\n"
        f"  ! tinydep 2.0: {TINYDEP2} was yanked on {fresh.url('pypi')} when locked (reason: broken); taken by an "
        "exact == pin\n"))
    assert len(fresh.requests) == before
    markdown = cli("diff", "locks/mid.toml", "e", "--format", "markdown").out
    assert markdown.endswith(
        "No differences (2 packages identical).\n\n#### Yanked (PEP 592)\n\n"
        f"- tinydep 2.0: {TINYDEP2} was yanked on {fresh.url('pypi')} when locked (reason: broken); taken by an "
        "exact == pin\n")
    # The index down: a note, exit 0, and what the lock records still said.
    fresh.stop()
    down = cli("diff", "locks/mid.toml", "e", "--yanked")
    assert (down.code, down.out) == (0, recorded.out)
    assert down.err.count("envlock: note: ") == 2
    assert down.err.startswith(f"envlock: note: 1 locked file of {fresh.url('nightly')} not checked for yanks: ")


def test_check_index_reads_each_package_once_at_its_index_or_mirror_and_skips_local_builds(fresh: IndexServer) -> None:
    from envlock.model.lockfile import Artifact, Lock, LockedPackage, canonicalize_name
    from envlock.resolution import yanks

    fresh.add("mirror", fresh.indexes["pypi"].files[TINYDEP2])
    fresh.yanked[TINYDEP2] = "broken"
    tinydep = LockedPackage(canonicalize_name("tinydep"), "2.0",
                            (Artifact("a" * 64, url=fresh.file_url("pypi", TINYDEP2)),), index=fresh.url("pypi"))
    kern = LockedPackage(canonicalize_name("kern"), "1.0",
                         (Artifact("b" * 64, path="../wheelhouse/kern-1.0-py3-none-any.whl"),))  # a local build
    lock = Lock(env="e", python=PY, platform=None, spec_digest="sha256:" + "0" * 64, spec_keys={},
                packages=(kern, tinydep))
    assert yanks.checkable(lock) == [tinydep]
    checked = yanks.check_index(lock)
    assert (checked.checked, checked.notes) == (1, ())
    assert checked.yanked == (yanks.Yanked("tinydep", "2.0", TINYDEP2, fresh.url("pypi"), "broken"),)
    assert _page_requests(fresh) == ["/pypi/simple/tinydep/"]
    fresh.requests.clear()
    mirrored = yanks.check_index(lock, read_at={"tinydep": fresh.url("mirror")})
    assert [y.index for y in mirrored.yanked] == [fresh.url("mirror")]
    assert _page_requests(fresh) == ["/mirror/simple/tinydep/"]


def test_an_index_that_cannot_be_read_is_one_note_and_asked_once() -> None:
    import socket
    import threading

    from envlock.model.lockfile import Artifact, Lock, LockedPackage, canonicalize_name
    from envlock.resolution import yanks

    # A host that answers every request 503: every page read fails.
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(conn)
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    down = f"http://127.0.0.1:{port}/simple"
    packages = tuple(LockedPackage(canonicalize_name(f"dep{i}"), "1.0",
                                   (Artifact("a" * 64, url=f"http://127.0.0.1:{port}/f/dep{i}-1.0-py3-none-any.whl"),),
                                   index=down) for i in range(5))
    lock = Lock(env="e", python=PY, platform=None, spec_digest="sha256:" + "0" * 64, spec_keys={}, packages=packages)
    try:
        checked = yanks.check_index(lock)
    finally:
        listener.close()
    assert (checked.yanked, checked.checked) == ((), 0)
    assert checked.notes == (f"5 locked files of {down} not checked for yanks: {down}/dep0/: cannot read the index "
                             "page: HTTP 503",)
    assert len(accepted) == 1  # the first package's page only


def test_lock_check_reads_a_private_index_with_the_specs_credentials(
        tmp_path: Path, ws: ScratchWorkspace, cli: Cli) -> None:
    import base64

    server = IndexServer(tmp_path / "served").start()
    try:
        server.add("pypi", build_wheel(tmp_path / "wheels", "tinydep", "2.0"))
        server.required_auth = "Basic " + base64.b64encode(b"alice:s3cret").decode()
        private = server.url("pypi").replace("http://", "http://alice:s3cret@")
        ws.write_spec("e", f'[env]\npython = "{PY}"\n[indexes.pypi]\nurl = "{private}"\ndefault = true\n'
                           '[packages]\ntinydep = ">=1.0"\n')
        assert cli("-q", "lock", "e").code == 0
        server.yanked[TINYDEP2] = "leaked token in the wheel"
        check = cli("lock", "e", "--check")
        assert (check.code, check.err) == (0, f"envlock: note: tinydep 2.0: {TINYDEP2} is yanked on "
                                              f"{server.url('pypi')} (reason: leaked token in the wheel)\n")
        assert server.auth_seen("") == server.required_auth  # the page /pypi/simple/tinydep/
        assert "s3cret" not in check.out + check.err + cli("lock", "e", "--check", "--json").out
    finally:
        server.stop()


def test_an_override_pinning_a_yanked_release_records_it_too(index: IndexServer, tmp_path: Path, ws: ScratchWorkspace,
                                                             cli: Cli) -> None:
    index.add("pypi", build_wheel(tmp_path / "wheels", "top", "1.0", requires=["tinydep>=1"]))
    ws.write_spec("e", f'[env]\npython = "{PY}"\n[indexes.pypi]\nurl = "{index.url("pypi")}"\ndefault = true\n'
                       '[packages]\ntop = ">=1"\n[resolution]\noverrides = ["tinydep==2.0"]\n')
    made = cli("lock", "e")
    assert made.code == 0, made.err
    assert made.out.splitlines()[-1].startswith(f"  note: tinydep 2.0: {TINYDEP2} is yanked on ")
    assert {p.name: p.yanked for p in read_lock(ws.root / "locks" / "pylock.e.toml").packages} == {
        "tinydep": "broken", "top": None}


def test_a_yank_reason_reaches_the_terminal_without_its_control_characters(fresh: IndexServer, ws: ScratchWorkspace,
                                                                           cli: Cli) -> None:
    ws.write_spec("e", _spec(fresh, ">=1.0"))
    assert cli("-q", "lock", "e").code == 0
    # An escape that clears the screen, a right-to-left override and a lone surrogate (JSON may carry one).
    fresh.yanked[TINYDEP2] = "bad\x1b[2J\u202ebuild\ud800 " + "x" * 300
    check = cli("lock", "e", "--check", "--json")
    assert check.code == 0, check.err
    reason = json.loads(check.out)["yanked"][0]["reason"]
    assert reason == "bad?[2J?build? " + "x" * 184 + "…"
    text = cli("lock", "e", "--check")
    assert f"is yanked on {fresh.url('pypi')} (reason: bad?[2J?build? xxx" in text.err and "\x1b" not in text.err
