"""Signed URL records: ``lock`` takes a hash-less index's wheel from a cache instead of downloading it.

Home A locks an env whose torch nightly comes from an index that publishes no hash (as PyTorch's)
and, with ``[cache] push``, pushes the wheel it downloaded to hash it with a signed URL record.
Home B locks the same spec against the cache: its lock is byte-identical and it reads 0 bytes of
the wheel from the index (the loopback index logs every file request), nor does the sync after.
A record that is not trusted, of another URL, tampered, or whose wheel is missing or has other
bytes is refused by exact message, and B downloads from the index as without a cache.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from envlock.cache.caches import wheel_key
from envlock.cache.signing import URL_RECORD_FORMAT, SecretKey, generate, sign_record
from envlock.cache.urlrecords import url_key
from kit.cacheservers import nginx_binary, nginx_cache
from kit.index import IndexServer
from kit.universe import backend_wheels
from kit.wheels import build_wheel
from kit.workspaces import Cli, ScratchWorkspace, cache_config

TAG = "cp311-cp311-manylinux_2_28_x86_64"


@dataclass
class Nightly:
    server: IndexServer
    wheel: str  # the 03-05 nightly's file name
    other: str  # the 03-06 one's


@pytest.fixture
def nightly(tmp_path: Path) -> Iterator[Nightly]:
    """A loopback index whose ``pt`` index lists two torch nightlies without a hash, and the build backends."""
    server = IndexServer(tmp_path / "served")
    server.add_index("pt", hashes=False)
    first = build_wheel(tmp_path / "wheels", "torch", "2.12.0.dev20260305+cu130", tag=TAG)
    second = build_wheel(tmp_path / "wheels", "torch", "2.12.0.dev20260306+cu130", tag=TAG)
    server.add("pt", first, second)
    server.add_dir("pypi", backend_wheels())
    server.start()
    yield Nightly(server, first.name, second.name)
    server.stop()


def _spec(server: IndexServer) -> str:
    return (f'[env]\npython = "3.11"\nplatform = "x86_64-manylinux_2_28"\n'
            f'[indexes.pypi]\nurl = "{server.url("pypi")}"\ndefault = true\n'
            f'[indexes.pt]\nurl = "{server.url("pt")}"\n'
            '[packages]\ntorch = { nightly = "2026-03-05", local = "cu130", index = "pt" }\n')


def _home_b(src: Path, dest: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> Path:
    """Another machine's checkout of the workspace without the lock, and its own fresh ENVLOCK_HOME."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("pylock.*"))
    monkeypatch.chdir(dest)
    monkeypatch.setenv("ENVLOCK_HOME", str(dest.parent / f"home-{name}"))
    return dest


def test_home_b_locks_from_home_a_url_records_on_nginx_reading_no_wheel_byte_from_the_index(
    ws: ScratchWorkspace, cli: Cli, nightly: Nightly, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if nginx_binary() is None:
        pytest.skip("nginx is not installed (.ci/run installs it: apt-get install -y nginx)")
    server, wheel = nightly.server, nightly.wheel
    ws.write_spec("e", _spec(server))
    with nginx_cache(tmp_path / "srv") as (url, folder):
        public = cli("cache", "keygen", "team-ci", "--out", str(tmp_path / "ci.key")).out.strip()
        cache_config(ws.root, urls=[url], push=url, key=str(tmp_path / "ci.key"), trusted_keys=[public])
        r = cli("lock", "e", "--json")  # home A: downloads the nightly to hash it, pushes it and its record
        assert r.code == 0, r.err
        a = json.loads(r.out)
        size = (tmp_path / "wheels" / wheel).stat().st_size
        assert (a["downloaded"], len(server.downloads(wheel))) == (size, 1)
        assert a["notes"] == ["caches: 2 uploads"]
        locked = ws.lock_text("e")
        torch_url = f"{server.base}/pt/files/{wheel}"
        assert torch_url in locked  # the URL the index lists, with the store's sha256 of its bytes
        sha = hashlib.sha256((tmp_path / "wheels" / wheel).read_bytes()).hexdigest()
        assert (folder / wheel_key(sha)).read_bytes() == (tmp_path / "wheels" / wheel).read_bytes()
        record = json.loads((folder / url_key(torch_url)).read_bytes())
        assert (record["format"], record["record"]) == (URL_RECORD_FORMAT, {
            "url": torch_url, "filename": wheel, "sha256": sha, "size": size, "builder": "team-ci"})
        r = cli("cache", "push", "e", "--to", url, "--key", str(tmp_path / "ci.key"), "--json")
        assert r.code == 0, r.err
        pushed = json.loads(r.out)  # the wheel and its record were there: only the closure is new
        assert [k.rsplit("/", 1)[1] for k in pushed["uploaded"]] == ["pylock.e.toml", "envlock-bundle.json"]
        assert pushed["present"] == 2
        r = cli("cache", "verify", url, "--trusted-key", public)
        assert (r.code, r.out) == (0, f"{url}: 3 entries checked, all verified\n")

        b = _home_b(ws.root, tmp_path / "ws-b", monkeypatch, "b")
        cache_config(b, urls=[url], trusted_keys=[public])
        probes = server.probes(wheel)
        r = cli("lock", "e", "--json")
        assert r.code == 0, r.err
        got = json.loads(r.out)
        assert (b / "locks" / "pylock.e.toml").read_text() == locked  # byte-identical
        assert (got["downloaded"], got["notes"]) == (0, ["caches: 1 wheel"])
        assert len(server.downloads(wheel)) == 1  # still only home A's: B read no byte of it from the index
        r = cli("sync", "e", "--json")
        assert r.code == 0, r.err
        assert (json.loads(r.out)["downloaded"], len(server.downloads(wheel))) == (0, 1)
        assert server.probes(wheel) == probes  # not even a one-byte size probe of it


def _resign(key: SecretKey, change: Callable[[dict[str, object]], None]) -> Callable[[Path, str], None]:
    """The record at a cache key re-signed by ``key`` after ``change``."""
    def edit(cache: Path, name: str) -> None:
        record = json.loads((cache / name).read_bytes())["record"]
        change(record)
        (cache / name).write_bytes(sign_record(record, key, URL_RECORD_FORMAT))
    return edit


def _tamper(cache: Path, key: str) -> None:
    doc = json.loads((cache / key).read_bytes())
    doc["record"]["sha256"] = "0" * 64  # the signature stays team-ci's, over the old bytes
    (cache / key).write_text(json.dumps(doc))


def _flip_wheel(cache: Path, key: str) -> None:
    sha = json.loads((cache / key).read_bytes())["record"]["sha256"]
    data = bytearray((cache / wheel_key(sha)).read_bytes())
    data[300] ^= 1
    (cache / wheel_key(sha)).write_bytes(bytes(data))


def _drop_wheel(cache: Path, key: str) -> None:
    (cache / wheel_key(json.loads((cache / key).read_bytes())["record"]["sha256"])).unlink()


def _unsigned(cache: Path, key: str) -> None:
    doc = json.loads((cache / key).read_bytes())
    doc["signatures"] = []
    (cache / key).write_text(json.dumps(doc))


def test_refused_url_records_are_named_and_the_index_serves(
    ws: ScratchWorkspace, cli: Cli, nightly: Nightly, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, wheel = nightly.server, nightly.wheel
    ws.write_spec("e", _spec(server))
    cache = tmp_path / "nfs"
    url = f"file://{cache}"
    public = cli("cache", "keygen", "team-ci", "--out", str(tmp_path / "ci.key")).out.strip()
    cache_config(ws.root, push=url, key=str(tmp_path / "ci.key"))
    assert cli("lock", "e").code == 0
    locked = ws.lock_text("e")
    torch_url = f"{server.base}/pt/files/{wheel}"
    key = url_key(torch_url)
    original = (cache / key).read_bytes()
    wheel_bytes = (tmp_path / "wheels" / wheel).read_bytes()
    sha, size = hashlib.sha256(wheel_bytes).hexdigest(), len(wheel_bytes)
    flipped = bytearray(wheel_bytes)
    flipped[300] ^= 1
    other_url = torch_url.replace("20260305", "20260306")
    where = f"cache {url}: refused URL record of {wheel}"
    laptop, ci2 = generate("laptop"), generate("team-ci")  # ci2: another key of the name, trusted where said
    as_build = sign_record(json.loads(original)["record"], ci2)  # a build record's format, signed by ci2
    cases: list[tuple[str, Callable[[Path, str], object], str, str]] = [
        ("untrusted", _resign(laptop, lambda r: None),
         f"{where}: signed by 'laptop', which is not a trusted key (trusted: 'team-ci')", public),
        ("tampered", _tamper, f"{where}: the signature of trusted key 'team-ci' does not verify (the record was "
                              "changed after it was signed, or another key of that name signed it)", public),
        ("unsigned", _unsigned, f"{where}: signed by no key, which is not a trusted key (trusted: 'team-ci')", public),
        ("not a record", lambda c, k: (c / k).write_text('{"url": "x"}'),
         f"{where}: not a signed URL record (envlock-url-record version 1)", public),
        ("a build record", lambda c, k: (c / k).write_bytes(as_build),
         f"{where}: not a signed URL record (envlock-url-record version 1)", str(ci2.public())),
        ("another URL's", _resign(ci2, lambda r: r.update(url=other_url)),
         f"{where}: it records URL {other_url}, the index lists {torch_url}", str(ci2.public())),
        ("no wheel", _drop_wheel, f"{where}: its wheel {wheel_key(sha)} is not in the cache", public),
        ("flipped wheel", _flip_wheel,
         f"cache {url}: refused {wheel}: served bytes of sha256 {hashlib.sha256(flipped).hexdigest()} ({size} "
         f"bytes), expected {sha} ({size} bytes)", public),
    ]
    for n, (name, spoil, message, trusted) in enumerate(cases):
        spoiled = tmp_path / f"cache-{n}"
        shutil.copytree(cache, spoiled)
        for path in spoiled.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        spoil(spoiled, key)
        b = _home_b(ws.root, tmp_path / f"ws-{n}", monkeypatch, str(n))
        before = len(server.downloads(wheel))
        cache_config(b, urls=[f"file://{spoiled}"], trusted_keys=[trusted])
        r = cli("lock", "e", "--json")
        assert r.code == 0, (name, r.err)
        got = json.loads(r.out)
        assert got["notes"] == [message.replace(url, f"file://{spoiled}")], name
        assert len(server.downloads(wheel)) == before + 1, name  # from the index, as without a cache
        assert got["downloaded"] == size, name
        assert (b / "locks" / "pylock.e.toml").read_text() == locked, name
        r = cli("cache", "verify", f"file://{spoiled}", "--trusted-key", trusted, "--json")
        assert r.code == 1 and len(json.loads(r.out)["problems"]) == 1, name  # `cache verify` finds it too
        if name == "another URL's":
            assert json.loads(r.out)["problems"] == [f"{key}: records URL {other_url}, not its key's"]
    r = cli("cache", "verify", url, "--trusted-key", public)
    assert (r.code, r.out) == (0, f"{url}: 2 entries checked, all verified\n")  # the wheel and its record


@pytest.mark.parametrize(("url", "plain"), [
    ("https://download.pytorch.org/whl/nightly/cu130/torch-2.12.0.dev20260307%2Bcu130-cp312-cp312-"
     "manylinux_2_28_x86_64.whl", "https://download.pytorch.org/whl/nightly/cu130/torch-2.12.0.dev20260307%2Bcu130-"
     "cp312-cp312-manylinux_2_28_x86_64.whl"),
    ("https://ci:s3cr3t@Mirror.Internal:8443/pt/x-1.0-py3-none-any.whl?X-Amz-Signature=abc&X-Amz-Expires=60#sha256=00",
     "https://mirror.internal:8443/pt/x-1.0-py3-none-any.whl"),
    ("HTTP://token@host/x-1.0-py3-none-any.whl", "http://host/x-1.0-py3-none-any.whl"),
])
def test_a_url_record_key_and_record_carry_no_credentials_nor_query(url: str, plain: str) -> None:
    from envlock.cache.urlrecords import plain_url, url_record
    from envlock.model.lockfile import Artifact

    assert plain_url(url) == plain
    assert url_key(url) == url_key(plain) == f"urls/{hashlib.sha256(plain.encode()).hexdigest()}.json"
    record = url_record(Artifact(sha256="a" * 64, url=url, size=5), 5)
    assert record == {"url": plain, "filename": plain.rsplit("/", 1)[1].replace("%2B", "+"), "sha256": "a" * 64,
                      "size": 5}
    assert "s3cr3t" not in json.dumps(record) and "token" not in json.dumps(record)


def test_upgrade_pushes_the_wheels_it_hashed_and_a_dry_run_pushes_nothing(
    ws: ScratchWorkspace, cli: Cli, nightly: Nightly, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws.write_spec("e", _spec(nightly.server))
    assert cli("-q", "lock", "e").code == 0  # before any cache: 03-05 hashed into the store only
    cache = tmp_path / "team-cache"
    public = cli("cache", "keygen", "team-ci", "--out", str(tmp_path / "ci.key")).out.strip()
    cache_config(ws.root, urls=[f"file://{cache}"], push=f"file://{cache}", key=str(tmp_path / "ci.key"),
            trusted_keys=[public])
    dry = cli("upgrade", "e", "--nightly", "2026-03-06", "--dry-run")
    assert dry.code == 0, dry.err
    assert not cache.exists() or not any(cache.rglob("*.json"))  # the 03-06 wheel was hashed, not pushed
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home-2"))  # a store the dry run did not hash it into
    done = cli("upgrade", "e", "--nightly", "2026-03-06")
    assert done.code == 0, done.err
    assert len(list((cache / "urls").glob("*.json"))) == 1  # the 03-06 wheel's record, for the next machine
