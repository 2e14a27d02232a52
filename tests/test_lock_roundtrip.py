"""The lock writer escapes every character TOML requires escaped (DEL too): any string a spec can
carry into a lock (source URLs and revs, patch paths, build requirements, spec key paths, index
URLs, env names ...) reads back as written. A property test over arbitrary strings."""

from __future__ import annotations

import tomllib

from hypothesis import given, settings
from hypothesis import strategies as st

from envlock.lockfile import (
    Artifact,
    Lock,
    LockedBuild,
    LockedPackage,
    LockedPatch,
    LockedSource,
    NightlyPin,
    _s,
    canonicalize_name,
)

text = st.text()  # every code point but lone surrogates (which no TOML file or spec can hold)
some = st.text(min_size=1)  # the writer leaves out an empty optional value: it reads back as absent
maybe = st.none() | some
workspace_path = st.lists(st.text(st.characters(blacklist_characters="/\\", blacklist_categories=("Cs",)),
                                  min_size=1).filter(lambda p: p not in (".", "..") and p.strip()),
                          min_size=1, max_size=3).map("/".join)
url_prefix = st.text(st.characters(blacklist_characters="?#", blacklist_categories=("Cs",)))
sha = st.text("0123456789abcdef", min_size=64, max_size=64)

packages = st.lists(st.tuples(st.sampled_from(["torch", "flashinfer-python", "sgl-kernel", "six"]),
                              url_prefix, sha, maybe),
                    unique_by=lambda p: p[0], max_size=4).map(lambda rows: tuple(
    LockedPackage(canonicalize_name(name), "1.0",
                  (Artifact(sha256=digest, url=f"{prefix}/x-1.0-py3-none-any.whl"),), index)
    for name, prefix, digest, index in rows))

sources = st.dictionaries(text, st.one_of(
    st.builds(LockedSource, kind=st.just("git"), location=text, commit=maybe, rev=maybe, tree_digest=maybe,
              patches=st.lists(st.builds(LockedPatch, path=workspace_path, sha256=text), max_size=3).map(tuple)),
    st.builds(LockedSource, kind=st.just("path"), location=workspace_path, tree_digest=maybe)), max_size=3)

locks = st.builds(
    Lock,
    env=text,
    python=st.sampled_from(["3.11", "3.12", "3.13.1"]),
    platform=maybe,
    spec_digest=text,
    spec_keys=st.dictionaries(text, text, max_size=5),
    packages=packages,
    requires_python=maybe,
    nightlies=st.dictionaries(text, st.builds(NightlyPin, date=text, version=text), max_size=3),
    sources=sources,
    builds=st.dictionaries(text, st.builds(LockedBuild, input_digest=text, wheel=text, sha256=text,
                                           requirements=st.lists(text, max_size=3).map(tuple)), max_size=3),
)


@settings(max_examples=120, deadline=None)
@given(locks)
def test_every_lock_reads_back_as_written(lock: Lock) -> None:
    written = lock.to_toml()
    assert Lock.from_toml(written, "pylock.e.toml") == lock
    assert Lock.from_toml(written, "pylock.e.toml").to_toml() == written  # and writes the same bytes again


@settings(max_examples=300, deadline=None)
@given(text)
def test_every_string_is_a_toml_basic_string(value: str) -> None:
    assert tomllib.loads(f"k = {_s(value)}")["k"] == value


def test_del_and_every_control_character_are_escaped() -> None:
    controls = "".join(map(chr, [*range(0x20), 0x7F]))
    written = _s(controls)
    assert not any(c in written for c in controls.replace("\t", ""))
    assert "\\u007f" in written
    assert tomllib.loads(f"k = {written}")["k"] == controls
