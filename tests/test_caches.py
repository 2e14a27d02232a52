"""Binary caches end to end: two homes and one real nginx cache; every refusal named, each a fallback.

Home A builds the demo-shaped env's C extension and pushes it (the post-build hook, then
``cache push`` for the rest of the closure); home B, a clone of the workspace without its
wheelhouse, syncs with no build and gets the same venv digest. A cache that serves wrong bytes,
records signed by an untrusted key or of another build, answers 500 or hangs: each is named in a
one-line note, and the sync goes on from the next cache, the index or a build.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from envlock.cache.caches import CacheConfig, Caches, builds_into_wheelhouse, record_key, wheel_key
from envlock.cache.signing import generate, sign_record
from envlock.cache.urlrecords import url_key
from envlock.model.lockfile import read_lock
from envlock.store.bundle import Bundle
from envlock.store.store import Store
from kit.cacheservers import failing_server, hanging_server
from kit.index import IndexServer
from kit.locks import sha256_of
from kit.stores import how_made
from kit.workspaces import Cli, ScratchWorkspace, cache_config, write_demo


def _clone(src: Path, dest: Path) -> Path:
    """The workspace as a teammate's checkout has it: no wheelhouse (not committed)."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("wheelhouse"))
    return dest


@pytest.mark.slow
def test_home_b_syncs_home_a_build_from_nginx_with_no_build(ws: ScratchWorkspace, cli: Cli, backend_index: IndexServer,
                                                            nginx: tuple[str, Path], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    url, folder = nginx
    write_demo(ws.root, backend_index.url("pypi"))
    r = cli("cache", "keygen", "team-ci", "--out", str(tmp_path / "ci.key"))
    assert r.code == 0, r.err
    public = r.out.strip()
    cache_config(ws.root, urls=[url], push=url, key=str(tmp_path / "ci.key"), trusted_keys=[public])

    r = cli("sync", "demo", "--json")  # home A: builds, and the hook pushes the build
    assert r.code == 0, r.err
    a = json.loads(r.out)
    assert a["note"] == "caches: 2 uploads"
    lock = read_lock(ws.root / "locks" / "pylock.demo.toml")
    built = lock.builds["mini-kernel"]
    assert how_made(tmp_path / "home", built.input_digest) == "built here"
    assert (folder / record_key(built.input_digest)).is_file() and (folder / wheel_key(built.sha256)).is_file()

    r = cli("cache", "push", "demo", "--to", url, "--key", str(tmp_path / "ci.key"), "--json")
    assert r.code == 0, r.err
    pushed = json.loads(r.out)
    packaging = next(p for p in lock.packages if p.name == "packaging").wheels[0]
    closure = f"closures/demo/{lock.install_digest().removeprefix('sha256:')}"
    assert packaging.url is not None  # from the index: a signed URL record of it goes along (cacheurls)
    assert pushed["uploaded"] == [wheel_key(packaging.sha256), f"{closure}/pylock.demo.toml",
                                  f"{closure}/envlock-bundle.json", url_key(packaging.url)]
    # The closure's manifest is the one `envlock export` writes (a bundle's), its members at the cache's keys.
    manifest = Bundle.from_dict(json.loads((folder / closure / "envlock-bundle.json").read_bytes()), "cache")
    assert sorted((e.kind, e.key) for e in manifest.entries) == sorted(
        [("wheels", packaging.sha256), ("builds", built.input_digest.removeprefix("sha256:"))])
    assert manifest.lock_sha256 == sha256_of(folder / closure / "pylock.demo.toml")
    assert pushed["present"] == 2  # the build's wheel was pushed by the hook, and its record
    r = cli("cache", "push", "demo", "--to", url, "--key", str(tmp_path / "ci.key"), "--json")
    assert json.loads(r.out)["uploaded"] == []  # idempotent: only missing keys

    b = _clone(ws.root, tmp_path / "ws-b")  # home B: another machine, same checkout
    monkeypatch.chdir(b)
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home-b"))
    (b / "envlock.toml").write_text(f'[cache]\nurls = ["{url}"]\ntrusted-keys = ["{public}"]\n')
    r = cli("sync", "demo", "--json")
    assert r.code == 0, r.err
    got = json.loads(r.out)
    assert got["venv_digest"] == a["venv_digest"]
    assert got["note"] == "caches: 1 wheel, 1 build"
    assert how_made(tmp_path / "home-b", built.input_digest) == f"not built here: substituted from cache {url}, " \
        "signed by 'team-ci'"
    assert (b / "wheelhouse" / built.wheel).is_file()

    # `envlock build` asks the caches too (a planned build's input digest, before building).
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home-d"))
    (b / "wheelhouse" / built.wheel).unlink()
    r = cli("build", "demo", "--json")
    assert r.code == 0, r.err
    report = json.loads(r.out)
    assert (report["rebuilt"], report["notices"]) == (0, ["caches: 1 build"])
    assert how_made(tmp_path / "home-d", built.input_digest).startswith("not built here")
    assert sha256_of(b / "wheelhouse" / built.wheel) == built.sha256

    r = cli("cache", "verify", url, "--trusted-key", public)
    assert (r.code, r.out) == (0, f"{url}: 5 entries checked, all verified\n")
    wheel = folder / wheel_key(packaging.sha256)
    data = bytearray(wheel.read_bytes())
    data[100] ^= 1
    wheel.write_bytes(bytes(data))
    r = cli("cache", "verify", url, "--trusted-key", public, "--json")
    problems = json.loads(r.out)["problems"]
    assert r.code == 1 and len(problems) == 1
    assert problems[0].startswith(f"wheels/{packaging.sha256}: served bytes of sha256 ")

    # Refusals of the build record, each named; the build is left to build (nothing placed).
    stranger = generate("laptop")  # a key B trusts; the record is signed by team-ci
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home-c"))
    (b / "wheelhouse" / built.wheel).unlink()
    lock_path = b / "locks" / "pylock.demo.toml"
    caches = Caches(CacheConfig(urls=(url,), trusted={"laptop": stranger.public()}))
    assert builds_into_wheelhouse(caches, Store.open(), lock, lock_path, ["mini-kernel"]) == ("mini-kernel",)
    where = f"cache {url}: refused build record of mini-kernel ({built.input_digest[:19]})"
    assert caches.notes == [f"{where}: signed by 'team-ci', which is not a trusted key (trusted: 'laptop')"]
    # A record of another build, validly signed, stored under this build's key.
    key = generate("team-ci")  # another key of the name: what it signs does not verify with the first
    record = json.loads((folder / record_key(built.input_digest)).read_bytes())["record"]
    wrong = {**record, "input-digest": "sha256:" + "0" * 64}
    (folder / record_key(built.input_digest)).chmod(0o644)
    (folder / record_key(built.input_digest)).write_bytes(sign_record(wrong, key))
    caches = Caches(CacheConfig(urls=(url,), trusted={"team-ci": key.public()}))
    assert builds_into_wheelhouse(caches, Store.open(), lock, lock_path, ["mini-kernel"]) == ("mini-kernel",)
    assert caches.notes == [f"{where}: it records input digest sha256:000000000000, the lock's is "
                            f"{built.input_digest[:19]}"]
    # The right record, but the wheel it names has a flipped byte in the cache.
    (folder / record_key(built.input_digest)).write_bytes(sign_record(record, key))
    cached = folder / wheel_key(built.sha256)
    data = bytearray(cached.read_bytes())
    data[200] ^= 1
    cached.chmod(0o644)
    cached.write_bytes(bytes(data))
    caches = Caches(CacheConfig(urls=(url,), trusted={"team-ci": key.public()}))
    assert builds_into_wheelhouse(caches, Store.open(), lock, lock_path, ["mini-kernel"]) == ("mini-kernel",)
    assert len(caches.notes) == 1
    assert caches.notes[0].startswith(f"cache {url}: refused mini-kernel's wheel: served bytes of sha256 ")
    assert caches.notes[0].endswith(f", expected {built.sha256} ({cached.stat().st_size} bytes)")
    assert not (b / "wheelhouse" / built.wheel).exists()
    assert not Store.open().has("builds", built.input_digest.removeprefix("sha256:"))

    # End to end: with the record's key not trusted, the sync falls back to building, same venv.
    (b / "envlock.toml").write_text(f'[cache]\nurls = ["{url}"]\ntrusted-keys = ["{stranger.public()}"]\n')
    r = cli("sync", "demo", "--json")
    assert r.code == 0, r.err
    assert how_made(tmp_path / "home-c", built.input_digest) == "built here"
    got = json.loads(r.out)
    assert got["venv_digest"] == a["venv_digest"]
    notes = got["note"].split("; ")
    assert notes[0] == f"{where}: signed by 'team-ci', which is not a trusted key (trusted: 'laptop')"
    # packaging's wheel (flipped in the cache above) is one of the build's requirements too: the build
    # brought it into the store from the index, held to the locked hash, so the sync asked no cache for it.
    assert len(notes) == 1
    assert Store.open().has("wheels", packaging.sha256)


def _packaging_env(root: Path, index_url: str) -> None:
    (root / "envs" / "tiny.toml").write_text(
        f'[env]\npython = "3.11"\n\n[indexes.pypi]\nurl = "{index_url}"\ndefault = true\n\n'
        '[packages]\npackaging = ">=20"\n')


def test_wrong_bytes_500_and_a_hang_are_named_and_the_index_serves(
        ws: ScratchWorkspace, cli: Cli, backend_index: IndexServer, nginx: tuple[str, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    url, folder = nginx
    _packaging_env(ws.root, backend_index.url("pypi"))
    assert cli("lock", "tiny").code == 0
    lock = read_lock(ws.root / "locks" / "pylock.tiny.toml")
    art = lock.packages[0].wheels[0]
    real = (backend_wheels_dir() / art.filename).read_bytes()
    flipped = bytearray(real)
    flipped[50] ^= 1
    (folder / "wheels").mkdir(parents=True)
    (folder / wheel_key(art.sha256)).write_bytes(bytes(flipped))
    monkeypatch.setenv("ENVLOCK_CACHE_TIMEOUT", "0.5")
    with failing_server() as broken, hanging_server() as hung:
        cache_config(ws.root, urls=[broken, hung, url])
        r = cli("sync", "tiny", "--json")
    assert r.code == 0, r.err
    got = json.loads(r.out)
    actual = hashlib.sha256(bytes(flipped)).hexdigest()
    assert got["note"].split("; ") == [
        f"cache {broken}: wheels/{art.sha256}: HTTP 500: not used for the rest of this command",
        f"cache {hung}: wheels/{art.sha256}: timed out after 0.5 s waiting for an answer (connected): not used for "
        "the rest of this command",
        f"cache {url}: refused {art.filename}: served bytes of sha256 {actual} ({len(real)} bytes), expected "
        f"{art.sha256}" + (f" ({art.size} bytes)" if art.size is not None else ""),
    ]
    assert got["fetched"] == 1  # from the index, verified
    stored = Path(Store.open().path("wheels", art.sha256)) / art.filename
    assert stored.read_bytes() == real
    r = cli("verify", "tiny")
    assert r.code == 0, r.err


def test_a_good_wheel_in_a_file_cache_is_taken_before_the_index(
    ws: ScratchWorkspace, cli: Cli, backend_index: IndexServer, tmp_path: Path
) -> None:
    _packaging_env(ws.root, backend_index.url("pypi"))
    assert cli("lock", "tiny").code == 0
    art = read_lock(ws.root / "locks" / "pylock.tiny.toml").packages[0].wheels[0]
    cache = tmp_path / "nfs-cache"
    (cache / "wheels").mkdir(parents=True)
    shutil.copyfile(backend_wheels_dir() / art.filename, cache / wheel_key(art.sha256))
    cache_config(ws.root, urls=[f"file://{cache}"])
    r = cli("sync", "tiny", "--json")
    assert r.code == 0, r.err
    got = json.loads(r.out)
    assert got["note"] == "caches: 1 wheel"
    # What the cache gave is fetched and downloaded too: the counts agree with the note.
    assert (got["fetched"], got["downloaded"]) == (1, (cache / wheel_key(art.sha256)).stat().st_size)


def backend_wheels_dir() -> Path:
    from kit.universe import backend_wheels

    return backend_wheels()


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_push_then_a_fresh_home_syncs_from_the_cache_alone(kind: str, ws: ScratchWorkspace, cli: Cli,
                                                           backend_index: IndexServer, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from contextlib import nullcontext

    from kit.cacheservers import s3_server

    _packaging_env(ws.root, backend_index.url("pypi"))
    assert cli("sync", "tiny").code == 0
    servers = s3_server("team-cache") if kind == "s3" else nullcontext(f"file://{tmp_path / 'nfs'}")
    with servers as url:
        r = cli("cache", "push", "tiny", "--to", url, "--json")
        assert r.code == 0, r.err
        assert len(json.loads(r.out)["uploaded"]) == 3  # the wheel, the lock and the closure manifest
        monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "fresh"))
        monkeypatch.setenv("ENVLOCK_CACHE_URLS", url)
        # The index is unreachable for this sync (a mirror on a closed port): every byte comes from the cache.
        r = cli("sync", "tiny", "--json", "--index", "pypi=http://127.0.0.1:9/simple")
        assert r.code == 0, r.err
        assert json.loads(r.out)["note"] == "caches: 1 wheel"
        r = cli("cache", "verify", url)
        assert (r.code, r.out) == (0, f"{url}: 2 entries checked, all verified\n")


@pytest.mark.parametrize(("text", "message"), [
    ("cache = 3\n", "cache: expected a table [cache]"),
    ('[cache]\nurls = "http://x"\n', "cache.urls: expected an array of strings"),
    ("[cache]\ntrusted-keys = [1]\n", "cache.trusted-keys: expected an array of strings"),
    ("[cache]\npush = [\"http://x\"]\n", "cache.push: expected a string"),
    ('[cache]\ntrusted-keys = ["ci"]\n', "cache.trusted-keys[0]: 'ci': expected a public key as NAME:BASE64 "
                                         "(NAME of letters, digits, '.', '_', '-')"),
])
def test_a_bad_cache_table_is_named_by_file_and_key(ws: ScratchWorkspace, cli: Cli, text: str, message: str) -> None:
    _packaging_env(ws.root, "http://127.0.0.1:9/simple")
    (ws.root / "envlock.toml").write_text(text)
    r = cli("cache", "verify", "file:///nowhere")
    assert (r.code, r.err) == (2, f"envlock: error: {ws.root / 'envlock.toml'}: {message}\n")


def test_a_push_to_an_unreachable_cache_fails_naming_it(
    ws: ScratchWorkspace, cli: Cli, backend_index: IndexServer
) -> None:
    _packaging_env(ws.root, backend_index.url("pypi"))
    assert cli("lock", "tiny").code == 0
    art = read_lock(ws.root / "locks" / "pylock.tiny.toml").packages[0].wheels[0]
    r = cli("cache", "push", "tiny", "--to", "http://user:secret@127.0.0.1:9/cache")
    assert (r.code, r.err) == (1, f"envlock: error: cache http://127.0.0.1:9/cache: wheels/{art.sha256}: cannot "
                                  "connect (ConnectionRefusedError: [Errno 111] Connection refused)\n")
