"""What a hostile or limited index can do to a lock (issue 23), on a static index served by Python's
``http.server`` as many mirrors are (no byte ranges), and by a variant of it that serves them:

- metadata served beside a wheel (PEP 658) that is not the wheel's own fails the lock, naming the
  package, the index and both lists of requirements;
- a remote index's ``file:`` link is refused, naming the index, the package and the link;
- where ranges are not served, the guards read each wheel whole (into the store, by its sha256):
  two distributions installing one path with different bytes fail the lock as on any index, an
  exclude that matches nothing is noted, and only a wheel that truly cannot be read is "not
  checked", in one line for many.
"""

from __future__ import annotations

import hashlib
import html
import io
import os
import re
import sys
import tarfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from envlock import runner
from envlock.model.lockfile import read_lock
from envlock.store.store import Store, store_file
from kit.universe import BACKENDS
from kit.wheels import build_wheel

PY = f"{sys.version_info.major}.{sys.version_info.minor}"


class _Quiet(SimpleHTTPRequestHandler):
    """Python's static file server, as a mirror runs it: no byte ranges (a Range header is ignored:
    200 and the whole file)."""

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Ranged(_Quiet):
    """The same, serving ``Range: bytes=A-B`` and ``bytes=-N`` (as nginx and PyPI's CDN do)."""

    def send_head(self):  # type: ignore[no-untyped-def]  # http.server's own signature
        rng = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
        path = Path(self.translate_path(self.path))
        if rng is None or not path.is_file():
            return super().send_head()
        data = path.read_bytes()
        start, end = (len(data) - int(rng[2]), len(data)) if not rng[1] else (
            int(rng[1]), min(len(data), int(rng[2]) + 1) if rng[2] else len(data))
        start = max(0, start)
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        self.send_header("Content-Length", str(end - start))
        self.end_headers()
        import io

        return io.BytesIO(data[start:end])


@dataclass
class StaticIndex:
    """A PEP 503 index as files in ``root`` (``simple/<project>/index.html``, ``files/<wheel>``),
    served over HTTP on 127.0.0.1."""

    root: Path
    ranges: bool = False
    #: wheel file name -> the METADATA the index serves beside it (PEP 658), advertised on its page.
    metadata: dict[str, str] = field(default_factory=dict)
    #: wheel file name -> the URL its page links instead of ../../files/<name>.
    links: dict[str, str] = field(default_factory=dict)
    url: str = ""

    def add(self, *wheels: Path) -> None:
        files = self.root / "files"
        files.mkdir(parents=True, exist_ok=True)
        for wheel in wheels:
            (files / wheel.name).write_bytes(wheel.read_bytes())

    def publish(self) -> None:
        """Write every project's page from the files (and the metadata files)."""
        projects: dict[str, list[Path]] = {}
        for wheel in sorted((self.root / "files").glob("*.whl")):
            projects.setdefault(wheel.name.split("-")[0].replace("_", "-"), []).append(wheel)
        for project, wheels in projects.items():
            rows = []
            for wheel in wheels:
                sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
                attrs = ""
                if (served := self.metadata.get(wheel.name)) is not None:
                    (wheel.parent / f"{wheel.name}.metadata").write_text(served)
                    digest = hashlib.sha256(served.encode()).hexdigest()
                    attrs = f' data-core-metadata="sha256={digest}" data-dist-info-metadata="sha256={digest}"'
                href = self.links.get(wheel.name, f"../../files/{wheel.name}")
                rows.append(f'<a href="{html.escape(href)}#sha256={sha}"{attrs}>{wheel.name}</a><br/>')
            page = self.root / "simple" / project / "index.html"
            page.parent.mkdir(parents=True, exist_ok=True)
            page.write_text("<!DOCTYPE html><html><body>\n" + "\n".join(rows) + "\n</body></html>\n")

    def spec(self, packages: str, extra: str = "") -> str:
        return (f'[env]\npython = "{PY}"\nplatform = "x86_64-manylinux_2_28"\n'
                f'[indexes.mirror]\nurl = "{self.url}/simple"\ndefault = true\n'
                f"[packages]\n{packages}\n{extra}")


@pytest.fixture(params=["no ranges", "ranges"])
def static(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StaticIndex]:
    index = StaticIndex(tmp_path / "mirror", ranges=request.param == "ranges")
    (index.root / "files").mkdir(parents=True)
    handler = partial(_Ranged if index.ranges else _Quiet, directory=str(index.root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    index.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield index
    server.shutdown()
    server.server_close()


def _metadata(name: str, version: str, requires: Sequence[str] = ()) -> str:
    return "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                    *(f"Requires-Dist: {r}\n" for r in requires)])


# -- PEP 658 metadata that is not the wheel's own ----------------------------------------------------


def test_served_metadata_that_is_not_the_wheels_own_fails_the_lock(static: StaticIndex, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                    ws, cli) -> None:
    # issue 23, item 9: the index says liar requires nothing; its wheel requires otherdep==2.0. uv
    # resolves from what the index says, so the env would lack otherdep and fail at import.
    liar = build_wheel(tmp_path / "w", "liar", "1.0", requires=["otherdep==2.0"])
    static.add(liar, *(build_wheel(tmp_path / "w", "otherdep", v) for v in ("1.0", "2.0")))
    static.metadata[liar.name] = _metadata("liar", "1.0")
    static.publish()
    spec = ws.write_spec("e", static.spec('liar = "==1.0"'))
    index = f"index 'mirror' ({static.url}/simple)"
    for command in ("lock", "sync"):
        failed = cli(command, "e")
        assert (failed.code, failed.err) == (1, (
            f"envlock: error: {spec}: liar 1.0: {index} serves metadata for {liar.name} that is not the wheel's "
            "own; uv resolved the env from it, so nothing is locked\n"
            f"  liar 1.0 from {index}: {liar.name}\n"
            f"    the index's metadata ({static.url}/files/{liar.name}.metadata, PEP 658) requires nothing\n"
            '    the wheel\'s own METADATA requires "otherdep==2.0"\n'
            "    unmet: otherdep==2.0 (the resolution has no otherdep)\n")), command
        assert not (ws.root / "locks" / "pylock.e.toml").exists()

    # The index mends its metadata (other words, the same requirements), but uv answers from what its
    # cache kept of the lie: the resolution still lacks otherdep, and that is said with the way out.
    static.metadata[liar.name] = _metadata("liar", "1.0", ["otherdep ==2.0"])
    static.publish()
    cached = cli("lock", "e")
    assert (cached.code, cached.err) == (1, (
        f"envlock: error: {spec}: uv resolved the env from metadata of liar 1.0 that is not the wheel's own (what "
        "the index serves, or what uv's cache kept of it: `uv cache clean liar` drops that), so nothing is locked\n"
        f"  liar 1.0 from {index}: {liar.name}\n"
        f"    the index's metadata ({static.url}/files/{liar.name}.metadata, PEP 658) requires the same now\n"
        '    the wheel\'s own METADATA requires "otherdep==2.0"\n'
        "    unmet: otherdep==2.0 (the resolution has no otherdep)\n"))
    assert runner.uv(["cache", "clean", "liar"]).ok
    locked = cli("lock", "e")
    assert locked.code == 0, locked.err
    assert {p.name: p.version for p in read_lock(ws.root / "locks" / "pylock.e.toml").packages} == {
        "liar": "1.0", "otherdep": "2.0"}


# -- a remote index's file: links ------------------------------------------------------------------


@pytest.mark.parametrize("pinned", [False, True], ids=["read by uv", "read by envlock"])
def test_a_remote_index_page_may_not_link_a_file_on_this_machine(static: StaticIndex, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                 ws, cli, pinned: bool) -> None:
    # issue 23, item 10: the page links file:///…whl; envlock copied it from the local disk and locked
    # that URL. uv reads the page of a package on the default index; envlock reads it too when the
    # package is pinned to an index (here a second name for the same server).
    local = build_wheel(tmp_path / "elsewhere", "evil", "1.0")
    static.add(local)
    static.links[local.name] = local.as_uri()
    static.publish()
    extra = f'[indexes.other]\nurl = "{static.url}/simple"\n' if pinned else ""
    spec = ws.write_spec("e", static.spec('evil = { index = "other" }' if pinned else 'evil = "==1.0"', extra))
    failed = cli("lock", "e")
    problem = (f"lists {local.name} at {local.as_uri()}: file: links are refused on an http index page; "
               "expected http or https (a file: link would be copied from this machine's own disk)")
    if pinned:
        expected = f"envlock: error: {static.url}/simple/evil/: {problem}\n"
    else:
        expected = (f"envlock: error: {spec}: evil 1.0: uv resolved it from index 'mirror' ({static.url}/simple), "
                    f"which {problem}\n")
    assert (failed.code, failed.err) == (1, expected)
    assert not (ws.root / "locks" / "pylock.e.toml").exists()
    assert not list((Store.open().root / "wheels").glob("*/evil-*"))  # nothing copied from the disk


# -- an index that serves no byte ranges ----------------------------------------------------------


def test_without_ranges_two_distributions_installing_one_path_fail_the_lock(static: StaticIndex,  # type: ignore[no-untyped-def]
                                                                            tmp_path: Path, ws, cli) -> None:
    # issue 23, item 14: on http.server the guards read no file list ("could not be read ... not checked"
    # once per package) and locked two wheels that both install shared/__init__.py.
    one = build_wheel(tmp_path / "w", "one", "1.0", files={"shared/__init__.py": "ONE = 1\n", "one.py": ""})
    two = build_wheel(tmp_path / "w", "two", "1.0", files={"shared/__init__.py": "TWO = 2\n", "two.py": ""})
    static.add(one, two)
    static.publish()
    spec = ws.write_spec("e", static.spec('one = "==1.0"\ntwo = "==1.0"'))
    failed = cli("lock", "e")
    assert (failed.code, failed.err) == (1, (
        f"envlock: error: {spec}: one and two install the same files with different bytes; the one installed "
        "last would overwrite the other's, so nothing is locked\n"
        "  one 1.0 and two 1.0 both install shared/__init__.py (1 file, different bytes)\n"
        "    one 1.0: declared in [packages]\n"
        "    two 1.0: declared in [packages]\n"
        "    fix: keep one of packages.one and packages.two in e.toml; or, if the shared file is harmless, "
        'resolution.allow-overlap = [{ path = "shared/__init__.py", packages = ["one", "two"], reason = "..." }]\n'))
    # Read whole where no ranges are served, into the store by sha256 as any wheel: the sync after
    # a lock finds them there.
    store = Store.open()
    held = [store_file(store, a).is_file() for a in _artifacts(static, one, two)]
    assert held == ([True, True] if not static.ranges else [False, False])

    # The dead-exclude note is said there too (it needs every wheel's Requires-Dist).
    ws.write_spec("e", static.spec('one = "==1.0"', '[resolution]\nexclude = ["sgl-fa4"]'))
    noted = cli("lock", "e")
    assert noted.code == 0, noted.err
    assert [line for line in noted.out.splitlines() if "note:" in line] == [
        "  note: resolution.exclude: sgl-fa4 matched nothing: no package requires it"]


def _artifacts(static: StaticIndex, *wheels: Path):  # type: ignore[no-untyped-def]
    from envlock.model.lockfile import Artifact

    return [Artifact(sha256=hashlib.sha256(w.read_bytes()).hexdigest(), url=f"{static.url}/files/{w.name}")
            for w in wheels]


def test_wheels_that_truly_cannot_be_read_are_one_note(static: StaticIndex, tmp_path: Path, ws, cli) -> None:  # type: ignore[no-untyped-def]
    # The index lists them (with their sha256 and their metadata, from which uv resolves) but serves
    # no file: what they install cannot be read, whole or in part. Said once, for both.
    gone = [build_wheel(tmp_path / "w", name, "1.0") for name in ("gone-a", "gone-b")]
    static.add(*gone)
    for wheel, name in zip(gone, ("gone-a", "gone-b"), strict=True):
        static.metadata[wheel.name] = _metadata(name, "1.0")
    static.publish()
    for wheel in gone:
        os.unlink(static.root / "files" / wheel.name)
    ws.write_spec("e", static.spec('gone-a = "==1.0"\ngone-b = "==1.0"'))
    result = cli("lock", "e")
    assert result.code == 0, result.err
    notes = [line for line in result.out.splitlines() if "note:" in line]
    reason = "HTTP 404"  # the first request, a range or not, finds nothing
    assert notes == [
        "  note: what 2 wheels install could not be read; not checked for files another distribution installs "
        f"too: gone-a 1.0 ({static.url}/files/{gone[0].name}: {reason}), "
        f"gone-b 1.0 ({static.url}/files/{gone[1].name}: {reason})"]


# -- an index's sdist is never built ---------------------------------------------------------------


def test_an_index_cannot_make_lock_run_its_code(static: StaticIndex, tmp_path: Path, ws, cli) -> None:  # type: ignore[no-untyped-def]
    # uv built an sdist it found on the index to read its metadata: its setup.py ran during `envlock
    # lock` (which then refused the sdist, too late). An index's files are only ever wheels to a lock.
    ran = tmp_path / "ran"
    sdist = tmp_path / "sdistonly-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        for name, text in {
            "PKG-INFO": "Metadata-Version: 2.1\nName: sdistonly\nVersion: 1.0\n",
            "setup.py": f"import pathlib\npathlib.Path({str(ran)!r}).write_text('ran')\n"
                        "from setuptools import setup\nsetup(name='sdistonly', version='1.0')\n",
        }.items():
            data = text.encode()
            info = tarfile.TarInfo(f"sdistonly-1.0/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    static.add(*(BACKENDS / w for w in os.listdir(BACKENDS) if w.startswith("setuptools-")))
    static.publish()
    page = static.root / "simple" / "sdistonly" / "index.html"
    page.parent.mkdir(parents=True)
    (static.root / "files" / sdist.name).write_bytes(sdist.read_bytes())
    page.write_text(f'<a href="../../files/{sdist.name}#sha256={hashlib.sha256(sdist.read_bytes()).hexdigest()}">'
                    f"{sdist.name}</a>\n")
    spec = ws.write_spec("e", static.spec('sdistonly = "==1.0"'))
    failed = cli("lock", "e")
    assert not ran.exists()
    assert failed.code == 1
    assert failed.err.startswith(f"envlock: error: {spec}: uv found no resolution for env 'e'\n"), failed.err
    assert failed.err.endswith(
        "  envlock locks wheels only: it never builds an index's sdist to read its metadata (that would run the "
        "index's code); declare a [builds.NAME] to build one from a pinned source, or pin a version that has "
        "wheels\n")
