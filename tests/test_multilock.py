"""``model.multilock``: one-target locks merged into one PEP 751 file, and each read back out as it was."""

from __future__ import annotations

import tomllib

from packaging.pylock import Pylock
from packaging.utils import canonicalize_name

from envlock.model.lockfile import Artifact, Lock, LockedPackage
from envlock.model.multilock import TargetText, merge, split

X86 = "sys_platform == 'linux' and platform_machine == 'x86_64' and python_version == '3.11'"
ARM = "sys_platform == 'linux' and platform_machine == 'aarch64' and python_version == '3.12'"


def _pkg(name: str, version: str, filename: str, sha: str, yanked: str | None = None) -> LockedPackage:
    return LockedPackage(canonicalize_name(name), version, (Artifact(sha * 64, url=f"https://x/{filename}"),),
                         index="https://x/simple", yanked=yanked)


def _lock(python: str, platform: str, *packages: LockedPackage) -> Lock:
    return Lock(env="e", python=python, platform=platform, spec_digest="sha256:" + "0" * 64,
                spec_keys={"env": "1" * 16}, packages=packages, requires_python=f"=={python}.*", requires={})


SHARED = _pkg("pure", "1.0", "pure-1.0-py3-none-any.whl", "a")
# Packages sorted by name, as envlock writes them.
X86_LOCK = _lock("3.11", "x86_64-manylinux_2_28",
                 _pkg("native", "1.0", "native-1.0-cp311-cp311-manylinux_2_28_x86_64.whl", "b", yanked="broken"),
                 SHARED)
ARM_LOCK = _lock("3.12", "aarch64-manylinux_2_28",
                 _pkg("armonly", "2.0", "armonly-2.0-cp312-cp312-manylinux_2_28_aarch64.whl", "c"), SHARED)


def _texts() -> dict[str, TargetText]:
    return {name: TargetText(lock.platform or "", lock.python, lock.target_toml())
            for name, lock in (("x86", X86_LOCK), ("gb200", ARM_LOCK))}


def test_merge_writes_shared_entries_once_and_the_others_with_their_targets_marker() -> None:
    text = merge("e", _texts())
    doc = tomllib.loads(text)
    assert doc["environments"] == [ARM, X86]
    assert "requires-python" not in doc  # two pythons: each target's is its own
    assert [(p["name"], p.get("marker")) for p in doc["packages"]] == [
        ("armonly", ARM), ("native", X86), ("pure", None)]
    assert doc["packages"][1]["tool"] == {"envlock": {"yanked": "broken"}}  # its sub-table kept, after the marker
    assert sorted(doc["tool"]["envlock"]["targets"]) == ["gb200", "x86"]
    Pylock.from_dict(doc)


def test_each_target_reads_back_as_the_one_target_lock_it_was_written_from() -> None:
    text = merge("e", _texts())
    doc = tomllib.loads(text)
    for name, lock in (("x86", X86_LOCK), ("gb200", ARM_LOCK)):
        back = Lock.from_dict(split(doc, name), "x")
        assert back.target_toml() == lock.target_toml()
    # Written again from any target, the file's bytes come back.
    assert Lock.from_toml(text, "x", "gb200").to_toml() == text
    assert Lock.from_toml(text, "x", "x86").to_toml() == text


def test_a_one_target_lock_merged_alone_keeps_no_marker() -> None:
    text = merge("e", {"x86": _texts()["x86"]})
    doc = tomllib.loads(text)
    assert doc["environments"] == [X86] and doc["requires-python"] == "==3.11.*"
    assert all("marker" not in p for p in doc["packages"])
