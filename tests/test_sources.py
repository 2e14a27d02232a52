"""sources: git pins fetched into the store's mirror, path trees content-hashed, overrides loud."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envlock import sources, trees
from envlock.errors import SourceError, SourceTreeError, UsageError
from envlock.spec import SourceSpec
from envlock.store import Store
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
    assert sources.resolve_rev(sg.url, sg.pin) == sg.pin


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


def test_a_path_source_may_be_a_link_to_a_folder_outside_the_workspace(tmp_path: Path, store: Store) -> None:
    """Its content is what is hashed, wherever it lies; the spec's path is checked lexically."""
    elsewhere = tmp_path / "big-disk" / "k"
    write(elsewhere, {"pkg/real.py": "REAL = 1\n"})
    os.symlink("real.py", elsewhere / "pkg/alias.py")
    root = tmp_path / "ws"
    root.mkdir()
    (root / "k").symlink_to(elsewhere)
    prepared = sources.prepare(SourceSpec("k", path="k"), store, root)
    assert prepared.tree_digest == trees.tree_digest(elsewhere)
    assert prepared.location == "k"
    # Its links are judged from the source's top, as given: one that leaves it is refused.
    os.symlink("../../k/pkg/real.py", elsewhere / "pkg/out.py")
    with pytest.raises(SourceTreeError) as info:
        sources.prepare(SourceSpec("k", path="k"), store, root)
    assert str(info.value) == ("sources.k.path: k: symlink pkg/out.py -> ../../k/pkg/real.py leads outside the source "
                               f"tree; {_EXPECTED}")


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
    from envlock.mirrors import source_mirrors
    from envlock.spec import load_spec

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
