"""sources: git pins fetched into the store's mirror, path trees content-hashed, overrides loud."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envlock.build import sources
from envlock.errors import SourceError, SourceTreeError, UsageError
from envlock.model.spec import SourceSpec
from envlock.store import trees
from envlock.store.store import Store
from envlock.workspace import seen_through
from kit.sglike import SgLike, commit_all, git, init_repo, write
from kit.universe import Universe
from kit.workspaces import Cli, ScratchWorkspace


def test_git_source_checks_out_the_pinned_commit(sg: SgLike, store: Store, tmp_path: Path) -> None:
    prepared = sources.prepare(SourceSpec("sglike", git=sg.url, rev=sg.pin), store, tmp_path)
    assert prepared.commit == sg.pin
    assert prepared.commit_time == sg.pin_time == prepared.source_date_epoch
    assert prepared.requested_rev is None
    assert prepared.notice is None
    assert (prepared.tree / "python/sglike/comm.py").is_file()
    assert not (prepared.tree / ".git").exists()
    assert "12:" not in (prepared.tree / "python/sglike/comm.py").read_text()  # pin, not upstream
    assert prepared.tree_digest == trees.tree_digest(prepared.tree)
    assert prepared.tree == store.path("sources", f"git-{sg.pin}") / "tree"
    locked = prepared.locked()
    assert (locked.kind, locked.location, locked.commit, locked.tree_digest) == ("git", sg.url, sg.pin, None)


def test_branch_tag_and_short_rev_resolve_to_the_full_commit(sg: SgLike, store: Store) -> None:
    assert sources.resolve_rev(sg.url, "main", store=store) == sg.upstream
    assert sources.resolve_rev(sg.url, "v0.6.0", store=store) == sg.upstream
    assert sources.resolve_rev(sg.url, sg.pin[:10], store=store) == sg.pin
    assert sources.resolve_rev(sg.url, sg.pin, store=store) == sg.pin


def test_a_rev_is_resolved_through_a_mirror_into_the_spec_urls_mirror(sg: SgLike, store: Store) -> None:
    remote = "https://git.invalid/sglike"  # the spec's URL: unreachable, only its mirror answers
    assert sources.resolve_rev(remote, "main", store=store, fetch_from=sg.url) == sg.upstream
    assert sources.resolve_rev(remote, sg.pin[:10], store=store, fetch_from=sg.url) == sg.pin
    (mirror,) = (store.root / "git-mirrors").iterdir()  # one mirror, the spec URL's
    assert (mirror / "envlock-url").read_text() == remote + "\n"


def test_branch_is_resolved_once_then_the_locked_commit_is_used(sg: SgLike, store: Store, tmp_path: Path) -> None:
    spec = SourceSpec("sglike", git=sg.url, rev="main")
    first = sources.prepare(spec, store, tmp_path)
    assert (first.commit, first.requested_rev) == (sg.upstream, "main")
    # The lock recorded first.commit; a later prepare with it does not follow the branch.
    again = sources.prepare(spec, store, tmp_path, commit=sg.pin)
    assert again.commit == sg.pin


def test_unknown_rev_names_the_url_and_rev(sg: SgLike, store: Store) -> None:
    with pytest.raises(SourceError) as exc:
        sources.resolve_rev(sg.url, "no-such-branch", store=store)
    assert str(exc.value) == (
        f"{sg.url}: rev 'no-such-branch' names no branch or tag there; expected a branch, a tag or a commit hash"
    )


def test_missing_commit_is_an_error(sg: SgLike, store: Store) -> None:
    with pytest.raises(SourceError, match=r"commit 0{40} not found"):
        sources.checkout(store, sg.url, "0" * 40)


def test_server_refusing_sha_fetch_falls_back_to_full_fetch(
    sg: SgLike, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Protocol v0 servers refuse to send an unadvertised commit ("not our ref").
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "protocol.version")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "0")
    mirror = sources.fetch_commit(store, sg.url, sg.pin)
    assert not (mirror / "shallow").exists()  # full history came down
    co = sources.checkout(store, sg.url, sg.pin)
    assert co.commit == sg.pin


def test_sha_fetch_is_shallow(sg: SgLike, store: Store) -> None:
    mirror = sources.fetch_commit(store, sg.url, sg.pin)
    assert (mirror / "shallow").read_text().split() == [sg.pin]


def test_checkout_is_cached_in_the_store(sg: SgLike, store: Store) -> None:
    first = sources.checkout(store, sg.url, sg.pin)
    (store.path("git-mirrors", "x")).parent.mkdir(parents=True, exist_ok=True)
    again = sources.checkout(store, "file:///nonexistent/elsewhere", sg.pin)  # no fetch needed
    assert again.tree == first.tree and again.tree_digest == first.tree_digest


def test_path_source_is_snapshotted_by_digest(tmp_path: Path, store: Store) -> None:
    root = tmp_path / "ws"
    write(root, {"examples/k/pyproject.toml": "[project]\nname='k'\n", "examples/k/k.c": "int x;\n"})
    prepared = sources.prepare(SourceSpec("k", path="examples/k"), store, root)
    assert prepared.kind == "path" and prepared.commit is None
    assert prepared.tree_digest == trees.tree_digest(root / "examples/k")
    assert prepared.tree.parent == store.path("sources", "path-" + prepared.tree_digest.removeprefix("sha256:"))
    assert prepared.source_date_epoch == trees.PATH_SOURCE_EPOCH
    assert prepared.locked().tree_digest == prepared.tree_digest
    (root / "examples/k/k.c").write_text("int y;\n")
    assert sources.prepare(SourceSpec("k", path="examples/k"), store, root).tree_digest != prepared.tree_digest


# A path source's links as (path in the source, target); {out} is a folder outside it.
_EXPECTED = "expected links that stay inside it (a link is hashed by its text, not by what it points to)"


@pytest.mark.parametrize(
    ("links", "message"),
    [
        ([("pkg/extra.py", "{out}/extra.py")],
         "sources.k.path: k: symlink pkg/extra.py -> {out}/extra.py leads outside the source tree; " + _EXPECTED),
        ([("pkg/extra.py", "../../outside/extra.py")],
         "sources.k.path: k: symlink pkg/extra.py -> ../../outside/extra.py leads outside the source tree; "
         + _EXPECTED),
        # A build subdirectory that is a link out of the tree.
        ([("python", "{out}")], "sources.k.path: k: symlink python -> {out} leads outside the source tree; "
         + _EXPECTED),
        # Out and back in: the store's copy of the tree has another name and another parent.
        ([("pkg/again.py", "../../k/pkg/real.py")],
         "sources.k.path: k: symlink pkg/again.py -> ../../k/pkg/real.py leads outside the source tree; "
         + _EXPECTED),
        # Followed step by step: pkg/up is the tree's top, so up/.. is above it (lexically, pkg/x).
        ([("pkg/up", ".."), ("pkg/esc", "up/../x")],
         "sources.k.path: k: symlink pkg/esc -> up/../x leads outside the source tree; " + _EXPECTED),
        # Every link that leads out is named; one may lead out through another.
        ([("lib", "{out}"), ("pkg/extra.py", "../lib/extra.py")],
         "sources.k.path: k: 2 symlinks lead outside the source tree; " + _EXPECTED + "\n"
         "  symlink lib -> {out} leads outside the source tree\n"
         "  symlink pkg/extra.py -> ../lib/extra.py leads outside the source tree (through the symlink lib -> {out})"),
    ],
)
def test_a_path_source_with_a_link_out_of_its_tree_is_refused(tmp_path: Path, store: Store,
                                                               links: list[tuple[str, str]], message: str) -> None:
    """Its digest would record the link's text while a build reads what it points to."""
    out = tmp_path / "outside"
    write(out, {"extra.py": "VALUE = 1\n"})
    root = tmp_path / "ws"
    write(root, {"k/pkg/real.py": "REAL = 1\n"})
    for link, target in links:
        os.symlink(target.format(out=out), root / "k" / link)
    with pytest.raises(SourceTreeError) as info:
        sources.prepare(SourceSpec("k", path="k"), store, root)
    assert str(info.value) == message.format(out=out)
    assert info.value.exit_code == 2  # bad input: the tree is the user's to fix
    assert not (store.root / "sources").is_dir() or not any((store.root / "sources").iterdir())
    with pytest.raises(SourceTreeError):  # also where `lock --check` hashes the tree
        trees.tree_digest(root / "k")


def test_links_inside_a_path_source_are_kept_and_one_leading_out_is_not(tmp_path: Path, store: Store) -> None:
    root = tmp_path / "ws"
    write(root, {"k/pkg/real.py": "REAL = 1\n", "k/LICENSE": "MIT\n"})
    for link, target in [("pkg/alias.py", "real.py"), ("pkg/LICENSE", "../LICENSE"), ("lib", "pkg"),
                         ("pkg/up", ".."), ("pkg/via.py", "up/lib/real.py"), ("dangling", "nothing"),
                         ("loop1", "loop2"), ("loop2", "loop1")]:
        os.symlink(target, root / "k" / link)
    prepared = sources.prepare(SourceSpec("k", path="k"), store, root)
    assert prepared.tree_digest == trees.tree_digest(prepared.tree)
    assert os.readlink(prepared.tree / "pkg/via.py") == "up/lib/real.py"  # kept as a link
    assert (prepared.tree / "pkg/via.py").read_text() == "REAL = 1\n"
    os.symlink("up/../..", root / "k/pkg/top")  # lexically k/, but pkg/up is k/ already
    with pytest.raises(SourceTreeError) as info:
        sources.prepare(SourceSpec("k", path="k"), store, root)
    assert str(info.value) == ("sources.k.path: k: symlink pkg/top -> up/../.. leads outside the source tree; "
                               + _EXPECTED)


def test_a_tree_outside_the_workspace_is_an_override_not_a_link(tmp_path: Path, store: Store) -> None:
    """A path source linked out of the workspace is refused (a pull request's link is not reviewed code); a tree
    on another disk is tried with ``--override-source NAME=DIR``: hashed wherever it lies."""
    elsewhere = tmp_path / "big-disk" / "k"
    write(elsewhere, {"pkg/real.py": "REAL = 1\n"})
    os.symlink("real.py", elsewhere / "pkg/alias.py")
    root = tmp_path / "ws"
    root.mkdir()
    (root / "k").symlink_to(elsewhere)
    with pytest.raises(SourceError) as exc:
        sources.prepare(SourceSpec("k", path="k"), store, root)
    assert exc.value.message.startswith("sources.k.path: k: a symbolic link takes it out of the workspace")
    prepared = sources.prepare(SourceSpec("k", path="k"), store, root, override=elsewhere)
    assert prepared.tree_digest == trees.tree_digest(elsewhere)
    # Its links are judged from the tree's top, as given: one that leaves it is refused.
    os.symlink("../../k/pkg/real.py", elsewhere / "pkg/out.py")
    with pytest.raises(SourceTreeError) as info:
        sources.prepare(SourceSpec("k", path="k"), store, root, override=elsewhere)
    assert str(info.value).startswith(f"--override-source k={elsewhere}: symlink pkg/out.py -> ../../k/pkg/real.py "
                                      "leads outside the source tree")


def test_lock_refuses_a_path_source_with_a_link_out_of_its_tree(ws: ScratchWorkspace, cli: Cli, universe: Universe,
                                                                tmp_path: Path) -> None:
    from kit.universe import spec_text

    write(ws.root, {"k/pkg/real.py": "REAL = 1\n"})
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"', extra='[sources.k]\npath = "k"\n'))
    assert cli("lock", "e").code == 0
    outside = tmp_path / "outside.py"
    outside.write_text("VALUE = 1\n")
    (ws.root / "k/pkg/extra.py").symlink_to(outside)
    refusal = (f"envlock: error: sources.k.path: k: symlink pkg/extra.py -> {outside} leads outside the source tree; "
               f"{_EXPECTED}\n")
    r = cli("lock", "e", "--check")  # not "current": the link's target is not in the lock
    assert (r.code, r.err) == (2, refusal)
    r = cli("lock", "e")
    assert (r.code, r.err) == (2, refusal)
    r = cli("sync", "e")
    assert (r.code, r.err) == (2, refusal)


def test_override_source_is_loud(sg: SgLike, store: Store, tmp_path: Path) -> None:
    local = tmp_path / "checkout"
    init_repo(local)
    write(local, {"python/sglike/comm.py": "MAX_SIZES = {}\n"})
    commit_all(local, "local work")
    name, path = sources.parse_override(f"sglike={local}")
    prepared = sources.prepare(SourceSpec("sglike", git=sg.url, rev=sg.pin), store, tmp_path, override=path)
    assert name == "sglike"
    assert prepared.override == local
    assert (prepared.tree / "python/sglike/comm.py").read_text() == "MAX_SIZES = {}\n"
    assert not (prepared.tree / ".git").exists()
    assert prepared.notice is not None
    assert prepared.notice.startswith(f"OVERRIDDEN: source 'sglike' is built from the local tree {local}")
    assert f"not from its pin (commit {sg.pin})" in prepared.notice
    assert prepared.locked().commit == sg.pin  # the lock keeps the pin, never the override
    # A link out of it that no build reads is taken, as in the commit it stands in for (build.plan
    # refuses one in what a build reads).
    (local / "docs").mkdir()
    (local / "docs" / "GPL").symlink_to("/usr/share/common-licenses/GPL")
    linked = sources.prepare(SourceSpec("sglike", git=sg.url, rev=sg.pin), store, tmp_path, override=path)
    assert os.readlink(linked.tree / "docs" / "GPL") == "/usr/share/common-licenses/GPL"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("sglike", "--override-source 'sglike': expected NAME=PATH"),
        ("=x", "--override-source '=x': expected NAME=PATH"),
    ],
)
def test_override_syntax(value: str, message: str) -> None:
    with pytest.raises(UsageError) as exc:
        sources.parse_override(value)
    assert str(exc.value) == message


def test_override_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is not a directory"):
        sources.parse_override(f"x={tmp_path / 'missing'}")


def test_checkout_verifies_head(sg: SgLike, store: Store) -> None:
    co = sources.checkout(store, sg.url, sg.upstream)
    assert co.commit == sg.upstream
    assert git(sg.repo, "show", "-s", "--format=%ct", sg.upstream) == str(co.commit_time)


UNREACHABLE = "https://git.invalid/sgl-project/sglang"


def test_mirror_fetches_the_pinned_commit_but_the_lock_names_the_spec_url(
    sg: SgLike, store: Store, tmp_path: Path
) -> None:
    spec = SourceSpec("sglike", git=UNREACHABLE, rev=sg.pin)
    prepared = sources.prepare(spec, store, tmp_path, fetch_from=str(sg.repo))
    assert prepared.commit == sg.pin
    assert (prepared.tree / "python/sglike/comm.py").is_file()
    assert prepared.locked().location == UNREACHABLE
    assert prepared.notice is None  # the pinned commit itself, verified: nothing to warn about


def test_mirror_without_the_commit_is_an_error(sg: SgLike, store: Store, tmp_path: Path) -> None:
    other = tmp_path / "other"
    init_repo(other)
    write(other, {"x": "1\n"})
    commit_all(other, "unrelated")
    with pytest.raises(SourceError, match=f"commit {sg.pin} not found"):
        sources.prepare(SourceSpec("sglike", git=UNREACHABLE, rev=sg.pin), store, tmp_path, fetch_from=str(other))


def _unreachable_source_spec(sg: SgLike, extra: str = "") -> str:
    """A spec whose git source's URL cannot be reached: only a mirror can serve it."""
    return f"""
[env]
python = "3.11"
[indexes.pypi]
url = "https://pypi.org/simple"
default = true
[sources.sglike]
git = "{UNREACHABLE}"
rev = "{sg.pin}"
{extra}"""


def test_source_mirror_from_option_and_environment(ws: ScratchWorkspace, cli: Cli, sg: SgLike) -> None:
    from envlock.model.mirrors import source_mirrors
    from envlock.model.spec import load_spec

    ws.write_spec("e", _unreachable_source_spec(sg, '[sources.local]\npath = "x"\n[builds.k]\nsource = "local"\n'
                                                    f'[builds.k.fetchcontent.repo-cutlass]\ngit = "{UNREACHABLE}"\n'
                                                    f'rev = "{sg.pin}"\n'))
    spec = load_spec(ws.root / "envs" / "e.toml")
    env_var = {"ENVLOCK_SOURCE_SGLIKE": "/mirror/a", "ENVLOCK_SOURCE_REPO_CUTLASS": "/mirror/c"}
    assert source_mirrors(spec, None, env_var) == {"sglike": "/mirror/a", "repo-cutlass": "/mirror/c"}
    assert source_mirrors(spec, {"sglike": "/mirror/b"}, env_var) == {"sglike": "/mirror/b",
                                                                       "repo-cutlass": "/mirror/c"}
    with pytest.raises(UsageError, match=r"--source nope=\.\.\.: .* has no \[sources.nope\] nor a fetchcontent.nope; "
                                         r"known: local, repo-cutlass, sglike"):
        source_mirrors(spec, {"nope": "/m"}, {})
    with pytest.raises(UsageError, match=r"\[sources.local\] is a path source"):
        source_mirrors(spec, {"local": "/m"}, {})
    bad = cli("lock", "e", "--source", "sglike")
    assert (bad.code, bad.err) == (
        2, "envlock: error: --source 'sglike': expected NAME=URL (a spec source name and the mirror's URL)\n")


def test_lock_fetches_a_source_through_its_mirror(ws: ScratchWorkspace, cli: Cli, sg: SgLike,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    ws.write_spec("e", _unreachable_source_spec(sg))
    assert cli("lock", "e").code == 1  # the spec's URL cannot be reached
    by_option = cli("lock", "e", "--source", f"sglike={sg.repo}")
    assert by_option.code == 0, by_option.err
    text = ws.lock_text("e")
    assert f'git = "{UNREACHABLE}"' in text and f'commit = "{sg.pin}"' in text and str(sg.repo) not in text
    (ws.root / "locks" / "pylock.e.toml").unlink()
    monkeypatch.setenv("ENVLOCK_SOURCE_SGLIKE", str(sg.repo))
    assert cli("lock", "e").code == 0
    assert ws.lock_text("e") == text


def test_a_url_that_looks_like_an_option_runs_nothing(store: Store, tmp_path: Path) -> None:
    # A mirror from --source or ENVLOCK_SOURCE_* reaches git without the spec's check:
    # git must get it after "--", where --upload-pack=CMD is a path, not a command to run.
    marker = tmp_path / "ran"
    url = f"--upload-pack=touch {marker}; git-upload-pack"
    with pytest.raises(SourceError):
        sources.resolve_rev("https://example.invalid/repo", "main", store=store, fetch_from=url)
    with pytest.raises(SourceError):
        sources.fetch_commit(store, "https://example.invalid/repo", "a" * 40, fetch_from=url)
    assert not marker.exists()


def test_a_source_that_cannot_be_fetched_names_the_mirror_options(ws: ScratchWorkspace, cli: Cli, sg: SgLike) -> None:
    # On a cluster with no route to the spec's git host, every command that fetches the
    # source says how to fetch it from a clone instead.
    import shutil

    (ws.root / "patches" / "sglike").mkdir(parents=True)
    shutil.copy(sg.patches_dir / sg.patches[0], ws.root / "patches" / "sglike")
    ws.write_spec("e", _unreachable_source_spec(sg, f'patches = ["patches/sglike/{sg.patches[0]}"]\n'))
    hint = f"no access to {UNREACHABLE}? fetch the pinned commit from a clone or mirror: "
    both = f"{hint}--source sglike=URL-OR-PATH or ENVLOCK_SOURCE_SGLIKE=URL-OR-PATH"
    for argv in (["lock", "e"], ["patch", "status", "e"], ["patch", "status", "e", "--against", "main"],
                 ["patch", "edit", "e", "sglike", "--dir", str(ws.root.parent / "w")],
                 ["patch", "rebase", "e", "sglike", "--to", "main"]):
        r = cli(*argv)
        assert r.code == 1 and both in r.err, (argv, r.err)
    assert cli("patch", "status", "e", "--source", f"sglike={sg.repo}").code == 0


def test_the_store_keeps_no_git_token(sg: SgLike, store: Store, tmp_path: Path) -> None:
    # The files that name a source's URL for people (a mirror's, a checkout's) hold no token.
    url = "http://ci:T0KEN@127.0.0.1:9/sglang.git"
    sources.prepare(SourceSpec("sglike", git=url, rev=sg.pin), store, tmp_path, fetch_from=str(sg.repo))
    written = [p for p in store.root.rglob("*") if p.is_file() and not p.is_symlink()
               and p.name in ("url", "envlock-url")]
    assert written and all(p.read_text() == "http://127.0.0.1:9/sglang.git\n" for p in written), written


def _run_guarded(argv: list[str], cwd: Path, env: dict[str, str], seconds: float = 30) -> tuple[int, str, float]:
    """``argv`` to its end, or killed with everything it started after ``seconds`` (exit -9): git's
    fd transport waited forever, holding the store's writer lock. (exit code, stderr, seconds taken)."""
    import signal
    import subprocess
    import time

    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
    return proc.returncode, err, time.monotonic() - started


def test_git_fd_and_ext_transports_are_refused_by_name_before_git_runs(tmp_path: Path) -> None:
    import sys

    ws = tmp_path / "ws"
    (ws / "envs").mkdir(parents=True)
    spec = ws / "envs" / "e.toml"
    spec.write_text('[env]\npython = "3.11"\n[indexes.pypi]\nurl = "http://127.0.0.1:9/simple"\ndefault = true\n'
                    '[sources.s]\ngit = "fd::3"\nrev = "main"\n')
    env = dict(os.environ, ENVLOCK_HOME=str(tmp_path / "home"))
    code, err, took = _run_guarded([sys.executable, "-m", "envlock.cli.main", "lock", "e"], ws, env)
    assert (code, err) == (2, f"envlock: error: {spec}: 1 problem in env spec 'e'\n  sources.s.git: expected an "
                              "https://, http://, ssh://, git:// or file:// URL, a user@host:path or a local path, "
                              "found 'fd::3' (transport fd::, a remote helper git would start; envlock lets git use "
                              "none)\n")
    assert took < 20
    # A mirror is no spec: named by its option or variable, before git runs too.
    spec.write_text(spec.read_text().replace("fd::3", "https://127.0.0.1:9/s.git"))
    code, err, _ = _run_guarded([sys.executable, "-m", "envlock.cli.main", "lock", "e", "--source", "s=ext::sh -c id"],
                                ws, dict(env, ENVLOCK_SOURCE_S="fd::3"))
    assert (code, err.splitlines()[:3]) == (2, [
        "envlock: error: 2 source mirrors are no repository git may read",
        "  ENVLOCK_SOURCE_S=...: expected an https://, http://, ssh://, git:// or file:// URL, a user@host:path or "
        "a local path, found 'fd::3' (transport fd::, a remote helper git would start; envlock lets git use none)",
        "  --source s=...: expected an https://, http://, ssh://, git:// or file:// URL, a user@host:path or a "
        "local path, found 'ext::sh -c id' (transport ext::, a remote helper git would start; envlock lets git use "
        "none)"])


@pytest.mark.parametrize("url", ["fd::3", "ext::sh -c touch% {marker}", "Fd::3", "testgit::{repo}"])
def test_git_itself_refuses_other_transports_whatever_the_url_came_from(tmp_path: Path, url: str) -> None:
    # A lock's or a store's URL reaches git without the spec's check: every git envlock runs allows
    # only https, http, ssh, git and file (protocol.allow), so fd:: fails at once instead of waiting.
    import sys

    marker = tmp_path / "ran"
    repo = tmp_path / "repo"
    init_repo(repo)
    given = url.format(marker=marker, repo=repo)
    probe = ("import sys; from envlock import runner; r = runner.git(['ls-remote', '--', sys.argv[1]]); "
             "print(r.returncode); print(r.stderr, file=sys.stderr)")
    code, err, took = _run_guarded([sys.executable, "-c", probe, given], tmp_path, dict(os.environ))
    assert code == 0 and took < 20, err
    assert "not allowed" in err, err
    assert not marker.exists()


def test_a_git_transfer_has_the_total_deadline_too(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from kit.cacheservers import Trickle

    monkeypatch.setenv("ENVLOCK_TRANSFER_TIMEOUT", "2")
    with Trickle(size=100_000, every=0.2) as trickle:  # git's first GET gets headers, then a trickle
        started = time.monotonic()
        with pytest.raises(SourceError) as info:
            sources.resolve_rev(f"{trickle.url}/repo.git", "main", store=store)
        took = time.monotonic() - started
    assert 2 <= took < 10, took
    assert info.value.message.startswith(f"{trickle.url}/repo.git: cannot list refs to resolve rev 'main'")
    assert info.value.details[-1] == ("envlock: ended after 2 s: the most one transfer may take "
                                      "(ENVLOCK_TRANSFER_TIMEOUT=2)")


def _as_imported(store: Store, kind: str, key: str, tmp_path: Path) -> Path:
    """A copy of the store's entry ``kind/key``, as an import would assemble it from a bundle."""
    import shutil

    work = tmp_path / "assembled"
    shutil.copytree(store.path(kind, key), work, symlinks=True)
    return work


@pytest.mark.parametrize("how", ["whole", "poisoned-tree", "no-commit-object", "other-commit-object", "dot-git"])
def test_an_imported_git_checkout_is_held_to_its_commit(sg: SgLike, store: Store, tmp_path: Path, how: str) -> None:
    sources.checkout(store, sg.url, sg.pin)
    work = _as_imported(store, "sources", f"git-{sg.pin}", tmp_path)
    comm = work / "tree" / "python" / "sglike" / "comm.py"
    comm.chmod(0o644)
    if how == "poisoned-tree":
        comm.write_text("import os\n")
    elif how == "no-commit-object":
        (work / sources.COMMIT_OBJECT).unlink()
    elif how == "other-commit-object":
        (work / sources.COMMIT_OBJECT).write_bytes(b"tree " + b"0" * 40 + b"\n")
    elif how == "dot-git":
        (work / "tree" / ".git").write_text("gitdir: /elsewhere\n")
    (tmp_path / "scratch").mkdir()
    problem = sources.checked_entry_problem(work, f"git-{sg.pin}", tmp_path / "scratch", what="x")
    if how == "whole":
        assert problem is None
        assert trees.tree_digest(work / "tree", links_inside=False) == (work / "tree-digest").read_text().strip()
        assert (work / "tree-digest").read_bytes() == (store.path("sources", f"git-{sg.pin}") / "tree-digest"
                                                       ).read_bytes()
        return
    assert problem is not None
    expected = {"poisoned-tree": "its files make git tree ", "no-commit-object": "it holds no commit object to "
                "check its tree against (export it again with this envlock)", "other-commit-object": "its commit "
                "object is ", "dot-git": "tree/.git is a .git folder or file, which no checkout holds"}[how]
    assert problem.startswith(expected), problem
    if how == "poisoned-tree":
        assert problem.endswith(f"but commit {sg.pin[:12]} names tree {git(sg.repo, 'rev-parse', sg.pin + '^{tree}')}")


@pytest.mark.parametrize("how", ["whole", "poisoned-tree", "other-archive", "no-archive"])
def test_an_imported_archive_is_held_to_its_sha256(store: Store, tmp_path: Path, how: str) -> None:
    import hashlib

    from kit.sglike import karch_archive

    archive = karch_archive(tmp_path / "a")
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    got = sources.store_archive(store, "https://example.invalid/karch.tar.gz", archive, sha, what="karch")
    work = _as_imported(store, "sources", f"archive-{sha}", tmp_path)
    header = work / "tree" / "include" / "karch.h"
    if how == "poisoned-tree":
        header.write_text("#define KARCH_MAGIC 666\n")
    elif how == "other-archive":
        (work / sources.ARCHIVE_BYTES).write_bytes(b"other")
    elif how == "no-archive":
        (work / sources.ARCHIVE_BYTES).unlink()
    (tmp_path / "scratch").mkdir()
    problem = sources.checked_entry_problem(work, f"archive-{sha}", tmp_path / "scratch", what="x")
    if how in ("whole", "poisoned-tree"):  # the tree kept is what the archive unpacks to, whatever came
        assert problem is None
        assert "KARCH_MAGIC 7" in header.read_text()
        assert (work / "tree-digest").read_text().strip() == got.tree_digest
        return
    assert problem == {"other-archive": f"its archive has sha256 {hashlib.sha256(b'other').hexdigest()}, not {sha}",
                       "no-archive": "it holds no archive to check its tree against (fetched by an older "
                                     "envlock)"}[how]


def test_a_path_source_a_symbolic_link_takes_out_of_the_workspace_is_refused(tmp_path: Path) -> None:
    # Where it is read too (a frozen sync reads the spec without checking its paths, then may build).
    root, outside = tmp_path / "ws", tmp_path / "outside"
    outside.mkdir()
    (outside / "id_rsa").write_text("TOP SECRET\n")
    (root / "examples").mkdir(parents=True)
    (root / "examples" / "evil").symlink_to(outside)
    store = Store.open(tmp_path / "home")
    with pytest.raises(SourceError) as exc:
        sources.prepare(SourceSpec("k", path="examples/evil"), store, root)
    assert exc.value.message == (f"sources.k.path: examples/evil: a symbolic link takes it out of the workspace (to "
                                 f"{outside}); expected a folder inside the workspace")
    assert not list((tmp_path / "home").rglob("id_rsa"))  # nothing copied into the store
    # A scratch workspace envlock makes (bisect's: links to the real one's entries) is said to see through them.
    seen_through(root, tmp_path)
    assert sources.prepare(SourceSpec("k", path="examples/evil"), store, root).kind == "path"
