"""Reading TOML: one message per way a document is not TOML, in the reading stage's error."""

from __future__ import annotations

import pytest

from envlock.errors import BuildError, LockError
from envlock.model.tomlio import load_toml


def test_a_toml_document_is_read() -> None:
    assert load_toml('a = [1, 2]\n[b]\nc = "d"\n', "x.toml", LockError) == {"a": [1, 2], "b": {"c": "d"}}


@pytest.mark.parametrize("text, message", [
    ("a = " + "[" * 5000 + "]" * 5000, "x.toml: not valid TOML: nested too deeply"),  # tomllib recurses per level
    ("a = \n", "x.toml: not valid TOML: Invalid value (at line 1, column 5)"),
])
def test_what_is_not_toml_is_the_callers_error(text: str, message: str) -> None:
    with pytest.raises(BuildError) as info:
        load_toml(text, "x.toml", BuildError)
    assert info.value.message == message
