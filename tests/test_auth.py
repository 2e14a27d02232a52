"""Credentials for a private index on loopback: $NETRC, its permissions, a redirect's own netrc
entry, a keyring command on PATH (the subprocess protocol uv uses), and what a 401 says."""

from __future__ import annotations

import base64
import hashlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from envlock.errors import PackageIndexError
from envlock.net import auth, http
from envlock.net.indexes import project_files
from kit.index import IndexServer, uv_compile
from kit.wheels import build_wheel
from kit.workspaces import Cli, ScratchWorkspace

PY = f"{sys.version_info.major}.{sys.version_info.minor}"


def _basic(login: str) -> str:
    return "Basic " + base64.b64encode(login.encode()).decode()


@pytest.fixture
def private(server: IndexServer, tmp_path: Path) -> Iterator[IndexServer]:
    """An index that answers 401 to any request without alice's credentials."""
    server.add("pypi", build_wheel(tmp_path / "wheels", "tinydep", "1.0"))
    server.required_auth = _basic("alice:s3cret")
    auth.forget()
    yield server
    auth.forget()


def _netrc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "ci-netrc"
    path.write_text(text)
    path.chmod(mode)
    monkeypatch.setenv("NETRC", str(path))
    return path


def _read_through_redirect(a: IndexServer, b: IndexServer, wheel: Path) -> None:
    """Read ``a``'s ``moved.whl``, which redirects to ``wheel`` on ``b``; stop both servers."""
    try:
        with http.open_stream(a.file_url("pypi", "moved.whl")) as body:
            assert b"".join(body.chunks) == wheel.read_bytes()
    finally:
        a.stop()
        b.stop()


def test_a_basic_auth_index_through_netrc_for_envlock_and_uv(private: IndexServer, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _netrc(tmp_path, monkeypatch, "machine 127.0.0.1\n  login alice\n  password s3cret\n")
    assert [f.filename for f in project_files(private.url("pypi"), "tinydep")] == ["tinydep-1.0-py3-none-any.whl"]
    assert private.auth_seen("") == _basic("alice:s3cret")  # the page /pypi/simple/tinydep/
    result = uv_compile(tmp_path, private.url("pypi"))  # uv reads $NETRC itself: it reaches uv unchanged
    assert result.ok, result.tail()


def test_a_401_names_the_index_where_envlock_looked_and_the_three_ways(private: IndexServer, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = _netrc(tmp_path, monkeypatch, "machine elsewhere.example login bob password x\n")
    with pytest.raises(PackageIndexError) as info:
        project_files(private.url("pypi"), "tinydep")
    host = private.base.removeprefix("http://")
    assert info.value.message == f"{private.url('pypi')}/tinydep/: cannot read the index page: HTTP 401: the " \
                                 "server asks for credentials"
    assert info.value.details == (
        f"looked for credentials in: the index URL (no user:password); {path} (no entry for 127.0.0.1); "
        "the keyring (off)",
        f"give them one of three ways: in the index URL (https://USER:TOKEN@{host}/..., in the spec or "
        f"ENVLOCK_INDEX_<NAME>); in a netrc file (`machine {host} login USER password TOKEN` in ~/.netrc or "
        "$NETRC, mode 600); or from a keyring: USER@ in the index URL and --keyring-provider subprocess "
        "(ENVLOCK_KEYRING_PROVIDER=subprocess), which runs `keyring get URL USER`")


def test_wrong_credentials_are_said_to_be_refused(private: IndexServer, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = _netrc(tmp_path, monkeypatch, "machine 127.0.0.1 login alice password wrong\n")
    with pytest.raises(PackageIndexError) as info:
        project_files(private.url("pypi"), "tinydep")
    assert info.value.message.endswith("HTTP 401: the server refused the credentials sent")
    assert info.value.details[0] == (f"looked for credentials in: the index URL (no user:password); "
                                     f"{path} (an entry for 127.0.0.1)")


def test_a_netrc_others_can_read_is_refused_with_the_chmod(private: IndexServer, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # Python's netrc refused it too, silently: the index then answered 401 with no hint.
    path = _netrc(tmp_path, monkeypatch, "machine 127.0.0.1 login alice password s3cret\n", mode=0o644)
    with pytest.raises(PackageIndexError) as info:
        project_files(private.url("pypi"), "tinydep")
    assert info.value.message == (
        f"{private.url('pypi')}/tinydep/: cannot read the index page: {path} holds credentials for 127.0.0.1 but "
        f"other users can read it (mode 0644); envlock does not send them: run `chmod 600 {path}`")
    assert private.auth_seen("") is None  # refused before anything was sent
    path.chmod(0o600)
    assert project_files(private.url("pypi"), "tinydep")


def test_an_unsafe_netrc_without_the_host_does_not_stop_other_requests(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    server = IndexServer(tmp_path / "served").start()
    server.add("pypi", build_wheel(tmp_path / "wheels", "tinydep", "1.0"))
    _netrc(tmp_path, monkeypatch, "machine elsewhere.example login bob password x\n", mode=0o644)
    try:
        assert project_files(server.url("pypi"), "tinydep")
    finally:
        server.stop()


def test_a_redirect_to_another_host_gets_that_hosts_own_netrc_entry(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # 127.0.0.1 and localhost: two hosts as netrc names them. Each gets its own entry, never the other's.
    wheel = build_wheel(tmp_path / "wheels", "x", "1.0")
    a, b = (IndexServer(tmp_path / n).start() for n in ("a", "b"))
    b.add("pypi", wheel)
    b.required_auth = _basic("bob:b0b")
    _netrc(tmp_path, monkeypatch, "machine 127.0.0.1 login alice password s3cret\n"
                                  "machine localhost login bob password b0b\n")
    target = b.file_url("pypi", wheel.name).replace("127.0.0.1", "localhost")
    a.redirects["/pypi/files/moved.whl"] = target
    _read_through_redirect(a, b, wheel)
    assert a.auth_seen("moved.whl") == _basic("alice:s3cret")
    assert b.auth_seen(wheel.name) == _basic("bob:b0b")


@pytest.fixture
def keyring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``keyring`` command on PATH that knows alice's password for any service; its calls are logged."""
    folder = tmp_path / "bin"
    folder.mkdir()
    log = tmp_path / "keyring.log"
    script = folder / "keyring"
    script.write_text(f"#!{sys.executable}\nimport sys\n"
                      "import os\n"
                      f"open({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + f' (from {{os.getppid()}})\\n')\n"
                      "args = [a for a in sys.argv[1:] if not a.startswith('--mode')]\n"
                      "if args[:1] == ['get'] and args[-1] == 'alice':\n"
                      "    print('s3cret')\n"
                      "else:\n"
                      "    sys.exit(1)\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return log


def test_the_keyring_is_asked_only_when_enabled(private: IndexServer, keyring: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    index = private.url("pypi").replace("http://", "http://alice@")
    with auth.credentials(index), pytest.raises(PackageIndexError) as info:
        project_files(private.url("pypi"), "tinydep")
    assert "the index URL (a user, no password)" in info.value.details[0]
    assert info.value.details[0].endswith("; the keyring (off)")
    assert not keyring.exists()
    monkeypatch.setenv("ENVLOCK_KEYRING_PROVIDER", "subprocess")
    with auth.credentials(index):
        assert project_files(private.url("pypi"), "tinydep")
    assert keyring.read_text() == f"get {private.url('pypi')} alice (from {os.getpid()})\n"


def test_keyring_for_envlock_and_uv_from_the_command_line(
        tmp_path: Path, keyring: Path, ws: ScratchWorkspace, cli: Cli) -> None:
    # A private nightly index without hashes: envlock reads its page and hashes the nightly itself,
    # uv resolves from it; both ask the keyring for alice's password (uv through UV_KEYRING_PROVIDER).
    server = IndexServer(tmp_path / "served").start()
    server.add_index("priv", hashes=False)
    server.add("priv", build_wheel(tmp_path / "wheels", "tinydep", "1.0"))
    server.add("priv", build_wheel(tmp_path / "wheels", "torch", "2.12.0.dev20260310+cpu"))
    server.required_auth = _basic("alice:s3cret")
    auth.forget()
    index = server.url("priv").replace("http://", "http://alice@")
    ws.write_spec("e", f'[env]\npython = "{PY}"\n[indexes.priv]\nurl = "{index}"\ndefault = true\n'
                       '[packages]\ntinydep = "==1.0"\n'
                       'torch = { nightly = "2026-03-10", local = "cpu", index = "priv" }\n')
    try:
        refused = cli("-q", "lock", "e")
        assert refused.code == 1, refused.err
        assert "HTTP 401: the server refused user alice without a password" in refused.err
        assert not keyring.exists()
        locked = cli("-q", "--keyring-provider", "subprocess", "lock", "e")
    finally:
        server.stop()
        auth.forget()
    assert locked.code == 0, locked.err
    lock = (ws.root / "locks" / "pylock.e.toml").read_text()
    assert "alice" not in lock and "s3cret" not in lock
    asked = f"get {server.url('priv')} alice"
    calls = keyring.read_text().splitlines()
    assert f"{asked} (from {os.getpid()})" in calls  # envlock, in this process
    assert any(c.startswith(asked) and not c.endswith(f"(from {os.getpid()})") for c in calls), calls  # uv


def test_a_url_password_is_percent_decoded_once_and_a_netrc_one_not_at_all(private: IndexServer, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    private.required_auth = _basic("alice:p@ss%41")
    index = private.url("pypi").replace("http://", "http://alice:p%40ss%2541@")
    with auth.credentials(index):
        assert project_files(private.url("pypi"), "tinydep")
    _netrc(tmp_path, monkeypatch, "machine 127.0.0.1 login alice password p@ss%41\n")
    assert project_files(private.url("pypi"), "tinydep")


def test_a_redirect_target_never_gets_the_netrc_default_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = build_wheel(tmp_path / "wheels", "x", "1.0")
    a, b = (IndexServer(tmp_path / n).start() for n in ("a", "b"))
    b.add("pypi", wheel)
    _netrc(tmp_path, monkeypatch, "default login carol password c4rol\n")
    a.redirects["/pypi/files/moved.whl"] = b.file_url("pypi", wheel.name).replace("127.0.0.1", "localhost")
    _read_through_redirect(a, b, wheel)
    assert a.auth_seen("moved.whl") == _basic("carol:c4rol")  # asked for directly: the default entry, as curl
    assert b.auth_seen(wheel.name) is None


@contextmanager
def _git_over_http(tmp_path: Path, login: str) -> Iterator[str]:
    """A repository served over git's dumb HTTP on 127.0.0.1 that answers 401 without ``login``; its URL."""
    import subprocess
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    from kit.sglike import commit_all, init_repo

    work = tmp_path / "src"
    init_repo(work)
    (work / "a.txt").write_text("a\n")
    commit_all(work, "a")
    served = tmp_path / "git-served"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(served / "repo.git")], check=True)
    subprocess.run(["git", "update-server-info"], cwd=served / "repo.git", check=True)
    wanted = _basic(login)

    class Private(SimpleHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.headers.get("Authorization") != wanted:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            super().do_GET()

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: Private(*a, directory=str(served)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/repo.git"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_no_password_is_in_any_command_line_a_lock_starts(tmp_path: Path, ws, cli,  # type: ignore[no-untyped-def]
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # Any user of the machine reads /proc/PID/cmdline: uv ran as `uv pip compile ... --default-index
    # http://alice:s3cret@host/simple`. Three private places, each with its own password in the spec:
    # the default index, an explicit index on another port, a git source over HTTP.
    from kit.argv import command_lines

    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    main, extra = (IndexServer(tmp_path / name).start() for name in ("main", "extra"))
    main.add("pypi", build_wheel(tmp_path / "wheels", "tinydep", "1.0"))
    extra.add_index("priv")
    extra.add("priv", build_wheel(tmp_path / "wheels", "privdep", "2.0"))
    main.required_auth, extra.required_auth = _basic("alice:s3cret"), _basic("bob:t0k%n")
    secrets = ("s3cret", "t0k%n", "t0k%25n", "g1tpw")
    try:
        with _git_over_http(tmp_path, "carol:g1tpw") as repo:
            ws.write_spec("e", f'[env]\npython = "{PY}"\n'
                               f'[indexes.pypi]\nurl = "{main.url("pypi").replace("http://", "http://alice:s3cret@")}"\n'
                               'default = true\n'
                               f'[indexes.priv]\nurl = "{extra.url("priv").replace("http://", "http://bob:t0k%25n@")}"\n'
                               '[packages]\ntinydep = "==1.0"\nprivdep = { version = "==2.0", index = "priv" }\n'
                               f'[sources.s]\ngit = "{repo.replace("http://", "http://carol:g1tpw@")}"\nrev = "main"\n')
            with command_lines() as seen:
                locked = cli("-q", "lock", "e")
            assert locked.code == 0, locked.err
    finally:
        main.stop()
        extra.stop()
    assert main.auth_seen("") == _basic("alice:s3cret") and extra.auth_seen("") == _basic("bob:t0k%n")
    uv_runs = [line for line in seen if " pip compile " in line]
    git_runs = [line for line in seen if line.startswith("git ")]
    assert uv_runs and any("ls-remote" in line for line in git_runs) and any(" fetch " in line for line in git_runs)
    assert [line for line in seen if any(s in line for s in secrets)] == []
    # Nor in what the lock wrote, said or left in the store (logs, git mirrors, records).
    said = locked.out + locked.err + ws.lock_text("e")
    assert [s for s in secrets if s in said] == [], said
    stored = [p for p in (tmp_path / "home").rglob("*") if p.is_file() and not p.is_symlink()]
    assert stored and [p for p in stored if any(s.encode() in p.read_bytes() for s in secrets)] == []


@pytest.mark.parametrize("given", ["netrc", "keyring"])
def test_no_password_from_a_netrc_or_a_keyring_is_in_a_command_line(tmp_path: Path, ws, cli,  # type: ignore[no-untyped-def]
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    request: pytest.FixtureRequest, given: str) -> None:
    # uv and envlock each read the netrc file and ask the keyring themselves: what they find never
    # reaches a command line either (envlock's `keyring get URL USER` names no password).
    from kit.argv import command_lines

    main, extra = (IndexServer(tmp_path / name).start() for name in ("main", "extra"))
    main.add("pypi", build_wheel(tmp_path / "wheels", "tinydep", "1.0"))
    extra.add_index("priv")
    extra.add("priv", build_wheel(tmp_path / "wheels", "privdep", "2.0"))
    main.required_auth = extra.required_auth = _basic("alice:s3cret")
    auth.forget()
    user = ""
    if given == "netrc":
        _netrc(tmp_path, monkeypatch, "machine 127.0.0.1 login alice password s3cret\n")
    else:
        monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
        request.getfixturevalue("keyring")
        monkeypatch.setenv("ENVLOCK_KEYRING_PROVIDER", "subprocess")
        user = "alice@"
    try:
        ws.write_spec("e", f'[env]\npython = "{PY}"\n'
                           f'[indexes.pypi]\nurl = "{main.url("pypi").replace("http://", f"http://{user}")}"\n'
                           'default = true\n'
                           f'[indexes.priv]\nurl = "{extra.url("priv").replace("http://", f"http://{user}")}"\n'
                           '[packages]\ntinydep = "==1.0"\nprivdep = { version = "==2.0", index = "priv" }\n')
        with command_lines() as seen:
            locked = cli("-q", "lock", "e")
    finally:
        main.stop()
        extra.stop()
        auth.forget()
    assert locked.code == 0, locked.err
    assert main.auth_seen("") == extra.auth_seen("") == _basic("alice:s3cret")
    assert any(" pip compile " in line for line in seen)
    assert given != "keyring" or any("keyring" in line and " get " in line for line in seen), seen
    assert [line for line in seen if "s3cret" in line] == []
    assert "s3cret" not in locked.out + locked.err + ws.lock_text("e")


def test_a_fetchcontent_inputs_pin_records_its_url_without_the_password(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # As found: a build's FetchContent inputs given as user:token@ URLs, a git tag and an archive without its
    # sha256 (pinned by a fetch), were recorded in the lock with the token; a commit or a sha256 was not.
    import io
    import tarfile

    from envlock.build.inputs import pin_input
    from envlock.model.spectables import FetchContentInput
    from envlock.store.store import Store

    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    store = Store.open(tmp_path / "home")
    with _git_over_http(tmp_path, "carol:g1tpw") as repo:
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w:gz") as tar:
            member = tarfile.TarInfo("arc/CMakeLists.txt")
            member.size = 3
            tar.addfile(member, io.BytesIO(b"# a"))
        (tmp_path / "git-served" / "arc.tar.gz").write_bytes(data.getvalue())
        secret = repo.replace("http://", "http://carol:g1tpw@")
        tag = pin_input(FetchContentInput("dep", git=secret, rev="main"), store, mirror=None, recorded=None)
        archive = pin_input(FetchContentInput("arc", url=secret.replace("/repo.git", "/arc.tar.gz")), store,
                            mirror=None, recorded=None)
    assert (tag.pin.git, tag.pin.rev, len(tag.pin.commit or "")) == (repo, "main", 40)
    assert (archive.pin.url, archive.pin.sha256) == (repo.replace("/repo.git", "/arc.tar.gz"),
                                                     hashlib.sha256(data.getvalue()).hexdigest())
