"""model.jsondoc: a result value's JSON document from its fields, what differs said at the call."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from envlock.model.jsondoc import json_doc
from envlock.model.lockchanges import Change
from envlock.model.lockdiff import DownloadSize, LockDiff
from envlock.resolution.yanks import IndexCheck, Yanked


@dataclass(frozen=True)
class Inner:
    name: str

    def to_dict(self) -> dict[str, Any]:
        return {"called": self.name}


@dataclass(frozen=True)
class Plain:
    n: int


@dataclass(frozen=True)
class Outer:
    path: Path
    lines: tuple[str, ...]
    inner: Inner | None
    inners: tuple[Inner, ...]
    plain: Plain
    table: dict[str, tuple[int, ...]] = field(default_factory=dict)
    flag: bool = False
    ratio: float = 0.5


VALUE = Outer(Path("/w/x"), ("a", "b"), Inner("i"), (Inner("j"),), Plain(3), {"k": (1, 2)}, True)


@pytest.mark.parametrize(("keys", "omit", "extra", "expected"), [
    ({}, (), {}, {"path": "/w/x", "lines": ["a", "b"], "inner": {"called": "i"}, "inners": [{"called": "j"}],
                  "plain": {"n": 3}, "table": {"k": [1, 2]}, "flag": True, "ratio": 0.5}),
    ({"lines": "text"}, ("inner", "inners", "plain", "table", "ratio"), {},
     {"path": "/w/x", "text": ["a", "b"], "flag": True}),
    ({}, ("inner", "inners", "plain", "table", "ratio"), {"flag": None, "more": (Inner("m"),)},
     {"path": "/w/x", "lines": ["a", "b"], "flag": None, "more": [{"called": "m"}]}),
])
def test_fields_keys_omitted_and_extra(keys: dict[str, str], omit: tuple[str, ...], extra: dict[str, object],
                                       expected: dict[str, Any]) -> None:
    assert json_doc(VALUE, keys=keys, omit=omit, extra=extra) == expected


def test_a_replaced_field_keeps_its_place_and_new_keys_come_last() -> None:
    doc = json_doc(Change("package", "torch", "1", None, pending=True), omit=("pending",), extra={"note": "x", "y": 1})
    assert list(doc) == ["kind", "name", "old", "new", "note", "y"]
    assert doc["note"] == "x"


def test_none_for_an_absent_value_and_an_error_for_one_json_cannot_hold() -> None:
    assert json_doc(Outer(Path("p"), (), None, (), Plain(0)))["inner"] is None

    @dataclass(frozen=True)
    class Odd:
        data: bytes

    with pytest.raises(TypeError, match="bytes: no JSON form"):
        json_doc(Odd(b"x"))


def test_the_documents_the_results_print_are_unchanged() -> None:
    # As the hand-written to_dicts wrote them (docs/diff.md's keys; `lock --check --json`'s yanks).
    change = Change("package", "torch", "1.0", None, "gone", pending=True)
    assert change.to_dict() == {"kind": "package", "name": "torch", "action": "pending", "old": "1.0", "new": None,
                                "note": "gone"}
    diff = LockDiff("a", "b", (change,), 3, new_size=DownloadSize(10, ("x",)))
    assert diff.to_dict() == {"format": 1, "old": "a", "new": "b", "unchanged_packages": 3,
                              "changes": [change.to_dict()], "nightlies": [], "sources": [], "builds": [],
                              "packages": [], "download": {"old": {"bytes": 0, "unknown": []},
                                                           "new": {"bytes": 10, "unknown": ["x"]}}}
    yanked = Yanked("torch", "1.0", "torch-1.0-py3-none-any.whl", "https://i/simple", "bad")
    assert IndexCheck((yanked,), ("n",), 2).to_dict() == {
        "yanked": [{"package": "torch", "version": "1.0", "file": "torch-1.0-py3-none-any.whl",
                    "index": "https://i/simple", "reason": "bad", "recorded": False, "live": True}],
        "notes": ["n"], "checked": 2}
