"""``sync ENV --lock PATH@REV``: a lock from an earlier revision takes its local build from a cache.

Home A syncs a git-tracked workspace twice, its build's patch changed in between (the wheel
keeps its file name, another build's bytes), each build pushed by ``[cache] push``, each lock
committed. A home with no wheelhouse (another machine's checkout), and A's own checkout (whose
wheelhouse holds the newer build under the same name), sync ``locks/pylock.e.toml@HEAD~1``:
the build comes from the cache by the lock's input digest, signed and held to the lock's
sha256; 0 builds, the lock's venv digest. Not trusted, it is refused by name and the sync
fails for the missing wheel, as without a cache.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from envlock.model.lockfile import Lock, read_lock
from envlock.store.store import Store
from kit.index import IndexServer
from kit.sglike import commit_all, git, init_repo, write
from kit.stores import how_made
from kit.workspaces import Cli, ScratchWorkspace, cache_config


def _patch(value: int) -> str:
    return ("Subject: another value\nWhy: a test.\nUpstream: none\n---\n"
            "diff --git a/tiny.py b/tiny.py\n--- a/tiny.py\n+++ b/tiny.py\n@@ -1 +1 @@\n"
            f"-VALUE = 1\n+VALUE = {value}\n")


def _workspace(root: Path, repos: Path, index_url: str) -> None:
    tiny = repos / "tiny"
    init_repo(tiny)
    write(tiny, {"pyproject.toml": '[build-system]\nrequires = ["setuptools"]\nbuild-backend = '
                 '"setuptools.build_meta"\n[project]\nname = "tiny"\nversion = "1.0"\n', "tiny.py": "VALUE = 1\n"})
    commit = commit_all(tiny, "tiny")
    write(root, {
        "envs/e.toml": f'[env]\npython = "3.11"\n[indexes.pypi]\nurl = "{index_url}"\ndefault = true\n'
                       f'[packages]\ntiny = {{ build = "tiny" }}\n[sources.tiny]\ngit = "{tiny}"\nrev = "{commit}"\n'
                       'patches = ["patches/tiny/0001-value.patch"]\n[builds.tiny]\nsource = "tiny"\n',
        "patches/tiny/0001-value.patch": _patch(2),
        ".gitignore": "wheelhouse/\n",
    })
    init_repo(root)


def test_sync_lock_at_an_earlier_revision_takes_its_build_from_the_cache(
    ws: ScratchWorkspace, cli: Cli, backend_index: IndexServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _workspace(ws.root, tmp_path / "repos", backend_index.url("pypi"))
    cache = f"file://{tmp_path / 'team-cache'}"
    public = cli("cache", "keygen", "team-ci", "--out", str(tmp_path / "ci.key")).out.strip()
    cache_config(ws.root, urls=[cache], push=cache, key=str(tmp_path / "ci.key"), trusted_keys=[public])
    r = cli("sync", "e", "--json")  # home A builds VALUE = 2; the hook pushes the build
    assert r.code == 0, r.err
    assert json.loads(r.out)["note"] == "caches: 3 uploads"  # the wheel, its record, the git source
    commit_all(ws.root, "lock: value two")
    write(ws.root, {"patches/tiny/0001-value.patch": _patch(3)})
    r = cli("sync", "e", "--json")  # the patch moved: relocked, built anew (same file name, other bytes)
    assert r.code == 0, r.err
    commit_all(ws.root, "lock: value three")
    old = Lock.from_toml(git(ws.root, "show", "HEAD~1:locks/pylock.e.toml"), "HEAD~1")
    new = read_lock(ws.root / "locks" / "pylock.e.toml")
    before, after = old.builds["tiny"], new.builds["tiny"]
    assert before.wheel == after.wheel and before.sha256 != after.sha256 and old.venv_digest is not None
    assert old.venv_digest != new.venv_digest
    ref = "locks/pylock.e.toml@HEAD~1"

    # Another machine: the checkout without a wheelhouse, a fresh store, the cache trusted.
    b = tmp_path / "ws-b"
    shutil.copytree(ws.root, b, ignore=shutil.ignore_patterns("wheelhouse"))
    monkeypatch.chdir(b)
    wheel = f"{b / 'wheelhouse' / before.wheel}"
    missing = (f"envlock: error: {before.wheel}: local artifact {wheel} cannot be read (No such file or directory); "
               "expected the wheel recorded in the lock "
               "(`envlock build e` builds it for the current spec; for a lock from another revision, check that "
               "revision out and `envlock sync e --frozen`)\n")
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home-none"))
    (b / "envlock.toml").unlink()  # no cache: as before, the historical build is missing
    r = cli("sync", "e", "--lock", ref)
    assert (r.code, r.err) == (1, missing)

    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home-b"))
    cache_config(b, urls=[cache], trusted_keys=[public])
    r = cli("sync", "e", "--lock", ref, "--json")
    assert r.code == 0, r.err
    got = json.loads(r.out)
    assert (got["venv_digest"], got["note"]) == (old.venv_digest, "caches: 1 build")
    builds = sorted(p.name for p in (Store.open(tmp_path / "home-b").root / "builds").iterdir())
    assert builds == [before.input_digest.removeprefix("sha256:")]  # 0 builds: only the cache's
    assert how_made(tmp_path / "home-b", before.input_digest) == (f"not built here: substituted from cache {cache}, "
                                                                   "signed by 'team-ci'")
    assert not (b / "wheelhouse").exists()  # the store holds it; the checkout is left as it was

    # A's checkout: its wheelhouse holds the newer build under the same name; the cache gives the old.
    monkeypatch.chdir(ws.root)
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home-c"))
    r = cli("sync", "e", "--lock", ref, "--json")
    assert r.code == 0, r.err
    assert (json.loads(r.out)["venv_digest"], json.loads(r.out)["note"]) == (old.venv_digest, "caches: 1 build")

    # A record signed by a key this home does not trust: refused by name; the wheel is missing, as without a cache.
    monkeypatch.chdir(b)
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home-d"))
    laptop = cli("cache", "keygen", "laptop", "--out", str(tmp_path / "laptop.key")).out.strip()
    cache_config(b, urls=[cache], trusted_keys=[laptop])
    r = cli("sync", "e", "--lock", ref)
    assert (r.code, r.err) == (1, missing + f"  cache {cache}: refused build record of tiny "
                                         f"({before.input_digest[:19]}): signed by 'team-ci', which is not a trusted "
                                         "key (trusted: 'laptop')\n")
    assert not Store.open(tmp_path / "home-d").has("builds", before.input_digest.removeprefix("sha256:"))
