"""The build recipe: which commit a source is prepared at, and the FetchContent checkouts a build gets."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from envlock.build import sources
from envlock.commands import buildsession
from envlock.errors import BuildError
from envlock.model.spec import BuildSpec, FetchContentInput, SourceSpec
from envlock.store.store import Store
from kit.locks import lock_for
from kit.sglike import KDEP_NAME, SgLike


def test_the_lock_pins_a_branch_only_while_the_spec_names_that_branch(sg: SgLike, store: Store,
                                                                       tmp_path: Path) -> None:
    spec = SourceSpec("sglike", git=sg.url, rev="main")
    locked = sources.prepare(spec, store, tmp_path, commit=sg.pin).locked()
    assert (locked.commit, locked.rev) == (sg.pin, "main")
    lock = replace(lock_for(None, "pypi", []), sources={"sglike": locked})
    assert buildsession.pinned_commit(spec, lock) == sg.pin  # resolved once: the branch is not followed
    # Another branch or tag, or another URL, is resolved again, not answered with the old commit.
    assert buildsession.pinned_commit(replace(spec, rev="v0.6.0"), lock) is None
    assert buildsession.pinned_commit(replace(spec, git=sg.url + "-fork"), lock) is None
    assert buildsession.pinned_commit(replace(spec, rev=sg.upstream), lock) == sg.upstream  # a hash is itself
    # A lock from before the rev was recorded cannot vouch for any branch.
    assert buildsession.pinned_commit(spec, replace(lock, sources={"sglike": replace(locked, rev=None)})) is None


def test_a_fetchcontent_input_that_cannot_be_fetched_names_its_mirror_variable(sg: SgLike, store: Store,
                                                                               tmp_path: Path) -> None:
    # As for a source (test_sources), but by the variable's real name: NAME upper-cased, "-" as "_".
    missing = tmp_path / "nowhere.git"
    spec = BuildSpec(name="k", source="s", fetchcontent=(FetchContentInput(KDEP_NAME, str(missing), sg.kdep_commit),))
    with pytest.raises(BuildError) as info:
        buildsession.checkout_fetchcontent(spec, store, {})
    assert info.value.message.startswith(f"[builds.k]: fetchcontent.{KDEP_NAME}: {missing}: ")
    assert info.value.details[-1] == (f"no access to {missing}? fetch the pinned commit from a clone or mirror: "
                                      f"--source {KDEP_NAME}=URL (or ENVLOCK_SOURCE_REPO_KDEP=URL)")
    # From a mirror: the checkout of the pinned commit, and no hint when the mirror fails.
    assert buildsession.checkout_fetchcontent(spec, store, {KDEP_NAME: str(sg.kdep_url)}) == {
        KDEP_NAME: store.path("sources", f"git-{sg.kdep_commit}") / "tree"}
    other = Store.open(tmp_path / "other")
    with pytest.raises(BuildError) as info:
        buildsession.checkout_fetchcontent(spec, other, {KDEP_NAME: str(missing)})
    assert not any("no access to" in line for line in info.value.details)
